"""What every route does around the engine: the app's state, the JSON body, the model check,
eager constraint compilation, the per-request record (id, timings, tokens) and its log line + metrics.
"""

from __future__ import annotations

import enum
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
from quart import Response, current_app, g, request

from modelc.errors import InvalidRequestError, ModelcError, NotFoundError, ServiceUnavailableError
from modelc.request import Constraint
from modelc.server.body import OFFLOAD_BYTES, parse_body
from modelc.server.fields import ReadFields
from modelc.server.generation import ChoiceResult, Timings
from modelc.server.served import Generating, ServedModel, ServedTokenizer, generating
from modelc.server.state import ServerState

STATE_KEY = "modelc"
T = TypeVar("T")


class RecordState(enum.IntEnum):
    """Where a request's record stands; each step happens once, in this order (a record may skip ACCOUNTED:
    a request that generated nothing), so `state >= X` says X is done."""

    OPEN = 0  # the request is being handled
    ACCOUNTED = 1  # its token counts are filled and counted in the metrics (once, even if a stream then breaks)
    LOGGED = 2  # its one log line is written and it is counted: nothing more happens to it


@dataclass(slots=True)
class RequestRecord:
    """One request's log line, filled in by the route and written once at the end."""

    request_id: str
    method: str
    path: str
    start: float = field(default_factory=time.monotonic)
    inference: bool = False
    streaming: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    ttft_s: float | None = None
    error: str | None = None
    client: str = "unknown"  # the client's IP (rate limits are per client)
    state: RecordState = RecordState.OPEN
    body: ReadFields | None = None  # the JSON body: its fields never read are logged as ignored


def get_state() -> ServerState:
    return current_app.extensions[STATE_KEY]


async def engine_for(state: ServerState, model: Any) -> ServedModel:
    """The engine serving a request's `model` field: the default engine when it is empty (or no
    ModelManager is attached); else the manager's view of that model, loaded on first use."""
    if state.models is None or not model or not isinstance(model, str):
        return current_engine(state)
    return await managed_engine(state, model)


def current_engine(state: ServerState) -> ServedModel:
    if state.engine is None:
        msg = f"model failed to load: {state.load_error}" if state.load_error else "model is loading; retry shortly"
        raise ServiceUnavailableError(msg)
    return state.engine


def require_generation(engine: ServedModel) -> Generating:
    """Embedding and MLP/ONNX models serve their own routes only."""
    return generating(engine)


def require_tokenizer(engine: ServedModel) -> ServedTokenizer:
    if engine.tokenizer is None:
        raise InvalidRequestError(f"model {engine.name!r} ({engine.architecture}) has no tokenizer")
    return engine.tokenizer


def record() -> RequestRecord:
    return g.modelc_record


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


async def read_json() -> dict[str, Any]:
    """The body as a checked JSON object (modelc.server.body); large bodies are parsed off the loop.
    It records which fields the route reads: the others are logged as ignored when the request ends."""
    raw = await request.get_data(as_text=False)
    parsed = await anyio.to_thread.run_sync(parse_body, raw) if len(raw) > OFFLOAD_BYTES else parse_body(raw)
    body = ReadFields(parsed)
    rec = g.get("modelc_record")
    if rec is not None:
        rec.body = body
    return body


def warn_ignored_fields(state: ServerState, rec: RequestRecord) -> None:
    """One warning per successful request that sent fields its route never read (as vLLM does)."""
    ignored = rec.body.ignored() if rec.body is not None else []
    if ignored and state.log is not None:
        state.log.warning("ignored request fields", id=rec.request_id, path=rec.path, fields=ignored)


async def json_off_loop(build: Callable[[], Any]) -> Response:
    """A JSON response whose body (build() and its serialization) is made in a worker thread: for
    large answers such as embeddings, which would hold the event loop for seconds."""

    def make() -> bytes:
        return json.dumps(build(), ensure_ascii=False).encode()

    return Response(await anyio.to_thread.run_sync(make), content_type="application/json")


async def offload(fn: Callable[..., T], *args: Any) -> T:
    """Run CPU work of a request (tokenizing, rendering a template, compiling a grammar) in a worker
    thread so the event loop keeps serving /health and streams meanwhile."""
    return await anyio.to_thread.run_sync(fn, *args)


MAX_MODEL_NAME_BYTES = 255  # a store name is a file name


async def managed_engine(state: ServerState, name: str, keep_alive_s: float | None = None) -> ServedModel:
    """The ModelManager's engine for a request's `model` name: a name that can never exist is a 400,
    and no error shows where the store lives on disk."""
    if len(name.encode("utf-8", "surrogatepass")) > MAX_MODEL_NAME_BYTES:
        raise InvalidRequestError(f"'model' must be at most {MAX_MODEL_NAME_BYTES} bytes", param="model")
    try:
        return await state.models.get(name, keep_alive_s)
    except ModelcError as e:
        from modelc import store

        hidden = e.message.replace(f" ({store.models_dir()})", "").replace(str(store.models_dir()), "the store")
        if hidden != e.message:
            e.message = hidden
            e.args = (hidden,)
        raise
    except OSError as e:  # a name the file system refuses (too long a component, ...)
        raise NotFoundError(f"model {name[:80]!r} not found ({e.strerror or 'bad name'})", param="model") from None


def check_model(state: ServerState, engine: ServedModel, body: dict[str, Any]) -> str:
    """The `model` field, when given, must name the served model (or an alias). Returns the name to echo."""
    model = body.get("model")
    if model is None or model == "":
        return engine.name
    if not isinstance(model, str):
        raise InvalidRequestError("'model' must be a string", param="model")
    if model != engine.name and model not in state.config.model_aliases:
        raise NotFoundError(f"model {model!r} not found; this server serves {engine.name!r}", param="model")
    return model


def precompile(engine: ServedModel, constraint: Constraint | None) -> None:
    """Compile a constraint now so a bad regex/schema is a 400 before any streaming starts."""
    if constraint is None:
        return
    from modelc.engine.constraint import compile_constraint  # lazy: llguidance loads only for a constrained request

    try:
        compile_constraint(constraint, engine.tokenizer)
    except ModelcError as e:
        raise InvalidRequestError(e.message, param=e.param or _constraint_param(constraint)) from None


def _constraint_param(c: Constraint) -> str:
    return {"regex": "grammar", "lark": "grammar", "gbnf": "grammar", "tool_call": "tools"}.get(
        c.kind, "response_format"
    )


def deadline(state: ServerState) -> float | None:
    t = state.config.request_timeout_s
    return None if t is None else time.monotonic() + t


def account(
    state: ServerState, rec: RequestRecord, results: list[ChoiceResult], prompt_lens: list[int], timings: Timings
) -> None:
    """Fill the record and the token/latency metrics from the choices (finished, or cut short by a
    disconnect: the tokens generated so far count). Runs once per record."""
    if rec.state >= RecordState.ACCOUNTED:
        return
    rec.state = RecordState.ACCOUNTED
    m = state.metrics
    rec.prompt_tokens = sum(prompt_lens)
    rec.completion_tokens = sum(len(r.token_ids) for r in results)
    rec.cached_tokens = sum(r.cached_tokens for r in results)
    m.prompt_tokens.inc(rec.prompt_tokens)
    m.tokens.inc(rec.completion_tokens)
    for n in prompt_lens:
        m.prompt_hist.observe(n)
    for r in results:
        m.generation_hist.observe(len(r.token_ids))
        if r.queue_time_s is not None:
            m.queue_time.observe(r.queue_time_s)
    if timings.first_token is not None:
        rec.ttft_s = timings.first_token - timings.start
        m.ttft.observe(rec.ttft_s)
    for dt in timings.itl_s:
        m.itl.observe(dt)


def finish_record(state: ServerState, rec: RequestRecord, status: int) -> None:
    """Write the one log line and count the request (once)."""
    if rec.state is RecordState.LOGGED:
        return
    rec.state = RecordState.LOGGED
    if status < 400:
        warn_ignored_fields(state, rec)
    if state.token_limiter is not None:  # --rate-limit-tokens: what the request used, answered or cut
        state.token_limiter.charge(rec.client, rec.prompt_tokens + rec.completion_tokens)
    elapsed = time.monotonic() - rec.start
    state.metrics.requests.labels(route=rec.path if status != 404 else "unknown", status=str(status)).inc()
    if rec.inference:
        state.metrics.inference.observe(elapsed)
    log = state.log
    if log is not None and state.config.log_requests:
        log.info(
            "request",
            id=rec.request_id,
            method=rec.method,
            path=rec.path,
            status=status,
            prompt_tokens=rec.prompt_tokens,
            completion_tokens=rec.completion_tokens,
            cached_tokens=rec.cached_tokens,
            ttft_ms=None if rec.ttft_s is None else round(rec.ttft_s * 1e3, 2),
            duration_ms=round(elapsed * 1e3, 2),
            stream=rec.streaming,
            error=rec.error,
        )
