"""ServerConfig (frozen, checked once) and ServerState: what one running app owns.

The state holds the engine (None while it loads), the metrics registry, the rate
limiter and the in-flight counter. Routes read it; nothing else mutates it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from modelc.errors import InvalidRequestError, OverloadedError
from modelc.pull.ref import SOURCES
from modelc.server.bounds import BOUNDS
from modelc.server.metrics import Metrics
from modelc.server.ratelimit import RateLimiter, TokenRateLimiter
from modelc.server.served import ServedModel


@dataclass(frozen=True, slots=True)
class GenerationDefaults:
    """Server-wide sampling defaults (`modelc run --temperature ...`); None = the endpoint's own default.
    Each is checked at start against the bound every request's own value meets (a default out of range
    would otherwise turn every request without that field into a 400 blaming the client)."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None

    def __post_init__(self) -> None:
        for name, bound in _DEFAULT_BOUNDS.items():
            v = getattr(self, name)
            if v is not None:
                BOUNDS[bound].check("--" + name.replace("_", "-"), v)


# the OpenAI routes' bounds: the strictest of the APIs a default serves (max_tokens >= 1, top_p > 0)
_DEFAULT_BOUNDS = {
    "max_tokens": "openai_max_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
}


@dataclass(frozen=True, slots=True)
class ServerConfig:
    api_key: str | None = None
    rate_limit_per_min: int | None = None  # requests per minute per client IP
    rate_limit_tokens_per_min: int | None = None  # model tokens (prompt + generated) per minute per client IP
    # input tokens one embeddings or rerank request may hold in all (OpenAI's per-request limit); None = any
    max_request_tokens: int | None = 300_000
    max_concurrent: int | None = None  # in-flight inference requests; more -> 503
    request_timeout_s: float | None = None  # per inference request; then 408 and the sequence aborted
    # larger bodies -> 413 (--max-body-mb). Parsing holds the GIL (~3-7 ms per MiB of text, more for
    # many small values), so this bounds how long one body can stall the event loop.
    max_body_bytes: int = 8 * 1024 * 1024
    retry_after_s: int = 1  # Retry-After on 503
    model_aliases: tuple[str, ...] = ()  # extra names accepted in the `model` field
    defaults: GenerationDefaults = field(default_factory=GenerationDefaults)
    log_requests: bool = True
    # security (modelc/server/guard.py, modelc/server/manager/lookup.py; docs/daemon.md "Security")
    control_token: str | None = None  # the daemon's own token (daemon.json): control routes accept it
    allowed_hosts: tuple[str, ...] = ()  # Host names accepted besides loopback names and IP literals; "*" = any
    cors_origins: tuple[str, ...] = ()  # origins that get CORS headers and may send state-changing requests
    models_dirs: tuple[str, ...] = ()  # --models-dir: folders whose .modelc files requests may name
    adapters_dir: str | None = None  # --adapters-dir (None = $MODELC_HOME/adapters)
    insecure_no_auth: bool = False  # allow a non-loopback bind without an API key
    registries: tuple[str, ...] = ()  # --registry: where /api/pull may download from (default $MODELC_REGISTRY)
    allow_sources: tuple[str, ...] = ()  # --allow-sources: remote sources /api/pull may use (hf, ollama, pypi, ...)
    webui: bool = True  # the chat page at / (--no-webui: only the plain-text answer)

    def __post_init__(self) -> None:
        if self.api_key is not None and not self.api_key:
            raise InvalidRequestError("--api-key must not be empty", param="api_key")
        if self.rate_limit_per_min is not None and self.rate_limit_per_min < 1:
            raise InvalidRequestError("--rate-limit must be >= 1", param="rate_limit")
        if self.rate_limit_tokens_per_min is not None and self.rate_limit_tokens_per_min < 1:
            raise InvalidRequestError("--rate-limit-tokens must be >= 1", param="rate_limit_tokens")
        if self.max_request_tokens is not None and self.max_request_tokens < 1:
            raise InvalidRequestError("--max-request-tokens must be >= 1", param="max_request_tokens")
        if self.max_concurrent is not None and self.max_concurrent < 1:
            raise InvalidRequestError("--max-concurrent must be >= 1", param="max_concurrent")
        if self.request_timeout_s is not None and not self.request_timeout_s > 0:
            raise InvalidRequestError("--request-timeout must be > 0", param="request_timeout")
        unknown = [s for s in self.allow_sources if s not in SOURCES]
        if unknown:
            raise InvalidRequestError(f"--allow-sources: unknown source {unknown[0]!r} (known: {', '.join(SOURCES)})",
                                      param="allow_sources")  # fmt: skip
        if self.max_body_bytes < 1024:
            raise InvalidRequestError("--max-body-mb must be at least 1 KiB (0.001)", param="max_body_bytes")


class ServerState:
    """Everything one app instance shares between requests (one event loop, no locks needed)."""

    def __init__(self, engine: ServedModel | None = None, config: ServerConfig | None = None) -> None:
        self.config = config or ServerConfig()
        self.engine = engine  # None while loading: /health answers 503
        self.metrics = Metrics()
        self.limiter = RateLimiter(self.config.rate_limit_per_min) if self.config.rate_limit_per_min else None
        tokens = self.config.rate_limit_tokens_per_min
        self.token_limiter = TokenRateLimiter(tokens) if tokens else None
        self.num_in_flight = 0
        self.started_at = time.time()
        self.load_error: str | None = None
        self.log: Any = None  # the app's structlog logger (set by create_app)
        self.models: Any = (
            None  # the daemon's ModelManager (modelc.server.manager.models) when it serves several models
        )
        self.request_shutdown: Any = None  # set by serve(): a callable that starts a graceful shutdown

    @property
    def ready(self) -> bool:
        return self.engine is not None

    def acquire_slot(self) -> None:
        """Count one inference request in; 503 at --max-concurrent (no queueing here: the engine queues)."""
        limit = self.config.max_concurrent
        if limit is not None and self.num_in_flight >= limit:
            err = OverloadedError(
                f"server is at --max-concurrent={limit} in-flight requests; retry later",
                retry_after_s=self.config.retry_after_s,
            )
            err.reason = "max_concurrent"  # counted by the error handler (server/errors.rejection_reason)
            raise err
        self.num_in_flight += 1
        self.metrics.active.inc()

    def release_slot(self) -> None:
        self.num_in_flight -= 1
        self.metrics.active.dec()
