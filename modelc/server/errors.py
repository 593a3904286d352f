"""ModelcError -> error responses in the shape of the API the request is on, and the HTTP errors Quart
raises (404, 405, 413) and unexpected exceptions (500) in the same shapes.

Bodies: OpenAI's {"error": {"message", "type", "param", "code"}} by default; Anthropic's
{"type": "error", "error": {"type", "message"}} on /v1/messages*; Ollama's {"error": "<message>"} on
/api/*; Cohere's {"message": "..."} on /v2/rerank. 429 and 503 carry Retry-After.
"""

from __future__ import annotations

import json
from typing import Any

from quart import Quart, Response, current_app, has_app_context, has_request_context, request
from werkzeug.exceptions import HTTPException

from modelc.errors import (
    AuthError,
    EngineError,
    ModelcError,
    OverloadedError,
    PayloadTooLargeError,
    RateLimitError,
    ServiceUnavailableError,
    ShuttingDownError,
)


def rejection_reason(err: ModelcError) -> str | None:
    """The `reason` label of modelc_requests_rejected_total for a refused request, None for other errors."""
    if isinstance(err, OverloadedError):
        return err.reason or ("shutting_down" if "shutting down" in err.message else "queue_full")
    return {
        RateLimitError: "rate_limit",
        ShuttingDownError: "shutting_down",
        ServiceUnavailableError: "model_loading",
        PayloadTooLargeError: "payload_too_large",
        AuthError: "unauthorized",
    }.get(type(err))


def count_rejection(err: ModelcError) -> None:
    if not has_app_context():
        return
    state = current_app.extensions.get("modelc")
    reason = rejection_reason(err)
    if state is not None and reason is not None:
        state.metrics.rejected.labels(reason=reason).inc()


def error_body(err: ModelcError) -> dict[str, Any]:
    return {"error": {"message": err.message, "type": err.error_type, "param": err.param, "code": err.code}}


# HTTP status -> Anthropic's error `type` (docs.anthropic.com, "Errors"); anything else is api_error.
ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    415: "invalid_request_error",
    429: "rate_limit_error",
    503: "overloaded_error",
}


def anthropic_error_body(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": ANTHROPIC_ERROR_TYPES.get(status, "api_error"), "message": message}}


def api_of_request() -> str:
    """Which API's error shape the current request gets: "ollama" (/api/*), "anthropic"
    (/v1/messages*), "cohere" (/v2/rerank) or "openai" (every other route, modelc's own included)."""
    if not has_request_context():
        return "openai"
    path = request.path
    if path.startswith("/api/"):
        return "ollama"
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return "anthropic"
    if path == "/v2/rerank":
        return "cohere"
    return "openai"


def ollama_shaped() -> bool:
    """Whether the current request is on the Ollama API (/api/*), whose clients read {"error": "..."}."""
    return api_of_request() == "ollama"


def shaped_body(message: str, openai_body: dict[str, Any], status: int = 400) -> dict[str, Any]:
    api = api_of_request()
    if api == "ollama":
        return {"error": message}
    if api == "anthropic":
        return anthropic_error_body(status, message)
    if api == "cohere":
        return {"message": message}
    return openai_body


def error_response(err: ModelcError) -> Response:
    body = shaped_body(err.message, error_body(err), err.http_status)
    resp = Response(json.dumps(body), status=err.http_status, content_type="application/json")
    wait = retry_after(err)
    if wait is not None:
        resp.headers["Retry-After"] = wait
    return resp


def retry_after(err: ModelcError) -> str | None:
    """A 429's or 503's Retry-After: the wait the error knows (a rate limit's), else the server's
    retry_after_s (ServerConfig, --retry-after); None for other statuses."""
    if err.http_status not in (429, 503):
        return None
    if err.retry_after_s is not None:
        return str(err.retry_after_s)
    state = current_app.extensions.get("modelc") if has_app_context() else None
    return None if state is None else str(state.config.retry_after_s)


_HTTP_TYPES = {
    404: ("not_found_error", "not_found"),
    405: ("invalid_request_error", "method_not_allowed"),
    413: ("invalid_request_error", "payload_too_large"),
}


def http_error_response(exc: HTTPException) -> Response:
    status = exc.code or 500
    error_type, code = _HTTP_TYPES.get(status, ("invalid_request_error" if status < 500 else "server_error", None))
    message = {
        404: "no such route",
        405: "method not allowed for this route",
        413: "request body too large: over the server's limit (modelc run --max-body-mb)",
    }.get(status, exc.description or exc.name)
    openai_body = {"error": {"message": message, "type": error_type, "param": None, "code": code}}
    body = shaped_body(message, openai_body, status)
    resp = Response(json.dumps(body), status=status, content_type="application/json")
    if status == 405 and getattr(exc, "valid_methods", None):
        resp.headers["Allow"] = ", ".join(exc.valid_methods)
    return resp


def install_error_handlers(app: Quart) -> None:
    @app.errorhandler(ModelcError)
    async def _modelc_error(err: ModelcError) -> Response:
        count_rejection(err)
        return error_response(err)

    @app.errorhandler(HTTPException)
    async def _http_error(exc: HTTPException) -> Response:
        return http_error_response(exc)

    @app.errorhandler(Exception)
    async def _unexpected(exc: Exception) -> Response:
        # A bug, not bad input: answer 500 with the error's class and message, never a traceback.
        app.logger.exception("unhandled error")
        return error_response(EngineError(f"internal error: {type(exc).__name__}: {exc}"))
