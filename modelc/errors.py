"""Every error modelc raises on bad input: one ModelcError tree.

The CLI prints `str(err)` on one line and exits non-zero; the server answers
`err.http_status` with an OpenAI-style body built from `err.error_type`/`err.code`.
"""

from __future__ import annotations


class ModelcError(Exception):
    """Base of every expected error: a one-line, user-facing message."""

    http_status: int = 400
    error_type: str = "invalid_request_error"
    code: str | None = None
    retry_after_s: int | None = None  # a 429 / 503's wait before a retry, where it knows one (else the server's)

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def __str__(self) -> str:
        return self.message


class FormatError(ModelcError):
    """A weights file is corrupt, truncated, or not of the format claimed."""


class UnsupportedError(ModelcError):
    """Valid input that modelc does not handle (a dtype, an op, an architecture)."""


class MemoryLimitError(UnsupportedError):
    """A model cannot run in the memory this process may fill (its cgroup's limit, the machine's free memory)."""


class ArtifactError(FormatError):
    """A .modelc file is corrupt, truncated, or of an unknown version."""


class ChecksumError(ArtifactError):
    """A tensor's bytes do not match the sha256 recorded in the artifact."""


class StoreError(ModelcError):
    """The local model store cannot do what was asked (exists, versions...)."""


class NotFoundError(ModelcError):
    http_status = 404
    code = "model_not_found"


class InvalidRequestError(ModelcError):
    """A request parameter is out of range or malformed (HTTP 400)."""


class AuthError(ModelcError):
    http_status = 401
    error_type = "authentication_error"
    code = "invalid_api_key"


class RateLimitError(ModelcError):
    """Too many requests from one client (HTTP 429 with Retry-After)."""

    http_status = 429
    error_type = "rate_limit_error"
    code = "rate_limit_exceeded"

    reason: str | None = None  # the metrics label when not the engine's queue ("max_concurrent": the server's limit)

    def __init__(self, message: str, *, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class OverloadedError(ModelcError):
    """Queue full / too many concurrent requests (HTTP 503 with Retry-After)."""

    http_status = 503
    error_type = "server_error"
    code = "overloaded"

    reason: str | None = None  # the metrics label when not the engine's queue ("max_concurrent": the server's limit)

    def __init__(self, message: str, *, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class NotSupportedError(ModelcError):
    """A route this model or server does not offer (llama-server's 501 for its disabled /slots)."""

    http_status = 501
    error_type = "not_supported_error"
    code = "not_supported"


class NoSlotError(ModelcError):
    """GET /slots?fail_on_no_slot=1 while every slot is busy (llama-server's 503)."""

    http_status = 503
    error_type = "unavailable_error"
    code = "no_slot_available"


class ServiceUnavailableError(ModelcError):
    """The model is still loading (or failed to load): HTTP 503 with Retry-After."""

    http_status = 503
    error_type = "server_error"
    code = "model_loading"


class ShuttingDownError(ModelcError):
    """The server is stopping: the drain time ran out before this request finished."""

    http_status = 503
    error_type = "server_error"
    code = "shutting_down"


class ManagerUnavailableError(ModelcError):
    """The daemon's model manager is not running (the daemon is starting or stopping)."""

    http_status = 503
    error_type = "server_error"
    code = "model_loading"


class ForbiddenError(ModelcError):
    """The server refuses the request (a Host or Origin it does not allow, a control route without the token)."""

    http_status = 403
    error_type = "permission_error"
    code = "forbidden"


class UnsupportedMediaTypeError(ModelcError):
    """A state-changing request whose body is not JSON."""

    http_status = 415
    code = "unsupported_media_type"


class PayloadTooLargeError(ModelcError):
    http_status = 413
    code = "payload_too_large"


class EngineError(ModelcError):
    """A forward pass failed; the request ends with this error."""

    http_status = 500
    error_type = "server_error"
    code = "engine_error"


class RequestTimeoutError(ModelcError):
    http_status = 408
    error_type = "timeout_error"
    code = "request_timeout"
