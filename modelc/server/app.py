"""create_app(state) -> the Quart app: blueprints, auth, rate limit, body limit, request records,
error bodies, /openapi.json. Routes only validate and call the engine; this module wires them.
"""

from __future__ import annotations

import sys
from typing import IO, Any

import structlog
from quart import Quart, Response, g, request

from modelc.errors import ModelcError, PayloadTooLargeError
from modelc.server import (
    anthropic_routes,
    completion_routes,
    guard,
    hypercorn_close,
    infill_routes,
    llama_embedding,
    lora_adapter_routes,
    native_routes,
    ollama_chat,
    ollama_routes,
    openai_chat,
    openai_completions,
    openai_routes,
    rerank_routes,
    responses_routes,
    slot_routes,
    webui,
)
from modelc.server.errors import count_rejection, error_response, install_error_handlers
from modelc.server.guard import EXEMPT_PATHS
from modelc.server.handling import STATE_KEY, RecordState, RequestRecord, finish_record, new_id
from modelc.server.openapi import openapi_spec
from modelc.server.state import ServerState


def make_logger(stream: IO[str] | None) -> Any:
    """A structlog JSON logger of this app only (the global structlog config is left alone)."""
    return structlog.wrap_logger(
        structlog.PrintLogger(stream or sys.stderr),
        processors=[structlog.processors.TimeStamper(fmt="iso", utc=True), structlog.processors.JSONRenderer()],
    )


def create_app(state: ServerState, *, log_stream: IO[str] | None = None) -> Quart:
    app = Quart("modelc", static_folder=None)
    app.config.update(
        MAX_CONTENT_LENGTH=state.config.max_body_bytes,
        RESPONSE_TIMEOUT=None,  # streams end on their own (or by --request-timeout), never mid-token
        BODY_TIMEOUT=60,
        JSON_SORT_KEYS=False,
    )
    app.json.sort_keys = False
    app.json.ensure_ascii = False
    app.extensions[STATE_KEY] = state
    state.log = make_logger(log_stream)
    state.metrics.watch_engine(lambda: state.engine.stats() if state.engine is not None else None)
    for bp in (
        openai_chat.bp,
        openai_completions.bp,
        openai_routes.bp,
        native_routes.bp,
        anthropic_routes.bp,
        responses_routes.bp,
        infill_routes.bp,
        completion_routes.bp,
        llama_embedding.bp,
        lora_adapter_routes.bp,
        rerank_routes.bp,
        slot_routes.bp,
        webui.bp,
    ):
        app.register_blueprint(bp)

    app.register_blueprint(ollama_routes.bp)
    app.register_blueprint(ollama_chat.bp)
    install_error_handlers(app)

    @app.get("/openapi.json")
    async def openapi() -> Any:
        return openapi_spec(app, state.engine, only_model=state.models is None, aliases=state.config.model_aliases)

    @app.before_request
    async def _guard() -> Response | None:
        rule = request.url_rule.rule if request.url_rule is not None else "unknown"
        client = request.remote_addr or "unknown"
        g.modelc_record = rec = RequestRecord(
            new_id("chatcmpl" if rule in ("/v1/chat/completions", "/chat/completions") else "cmpl"),
            request.method,
            rule,
            client=client,
        )
        exempt = request.path in EXEMPT_PATHS or webui.is_public(request.path)
        try:
            # Host, Origin, Content-Type, API key and control token, for every route (server/guard.py)
            guard.check_request(request, app.view_functions.get(request.endpoint or ""), state.config)
            if state.limiter is not None and not exempt:
                state.limiter.check(client)
            if state.token_limiter is not None and not exempt:
                state.token_limiter.check(client)
            length = request.content_length
            if length is not None and length > state.config.max_body_bytes:
                raise PayloadTooLargeError(
                    f"request body of {length} bytes exceeds the limit of {state.config.max_body_bytes} bytes "
                    "(the server's --max-body-mb)"
                )
        except ModelcError as e:
            rec.error = e.message
            count_rejection(e)
            return error_response(e)  # in the shape of the request's API (server/errors.py)
        return None

    @app.after_request
    async def _log(response: Response) -> Response:
        rec: RequestRecord | None = g.get("modelc_record")
        if rec is not None and not rec.streaming:
            if response.status_code >= 400 and rec.error is None:
                rec.error = f"HTTP {response.status_code}"
            finish_record(state, rec, response.status_code)
        response.headers.setdefault("X-Request-Id", rec.request_id if rec else "")
        hypercorn_close.close_if_body_unread(request, response)
        return guard.add_cors(request, response, state.config)

    @app.teardown_request
    async def _gone(exc: BaseException | None) -> None:
        # A handler cancelled because the client disconnected never reaches after_request: log it
        # as 499 here. (Streamed responses log themselves when the stream ends.)
        rec: RequestRecord | None = g.get("modelc_record")
        if rec is not None and not rec.streaming and rec.state is not RecordState.LOGGED:
            rec.error = rec.error or "client closed the connection before the response"
            finish_record(state, rec, 499)

    return app
