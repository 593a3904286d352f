"""serve(): hypercorn running the app inside one anyio task group with the AsyncEngine.

Order: bind and answer /health (503 "loading") at once, open the engine, then mark ready.
SIGINT/SIGTERM (or `shutdown`): stop accepting, let in-flight requests finish (bounded by
drain_timeout_s: shortly before it, every open generation ends with a "shutting_down" error event
instead of being cut off), close the engine, return. A second signal exits at once, and a process
that a signal asked to stop exits by force if it is still alive DRAIN_GRACE_S after the drain
timeout (a forward pass in a worker thread cannot be cancelled). Binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import anyio
from hypercorn.asyncio import serve as hypercorn_serve
from hypercorn.config import Config as HypercornConfig

from modelc import store
from modelc.api.opener import open_engine
from modelc.artifact.format import is_artifact
from modelc.config import EngineConfig
from modelc.errors import ModelcError, ShuttingDownError
from modelc.server import hypercorn_close, run_host
from modelc.server.app import create_app
from modelc.server.generation import interrupt_all
from modelc.server.guard import check_bind
from modelc.server.served import ServedModel
from modelc.server.state import ServerConfig, ServerState

DRAIN_GRACE_S = 5.0  # after the drain timeout, a signalled process exits by force
# An idle kept-alive connection is closed after this long. Longer than the client pools' own expiry
# (httpx and the openai SDK 5 s, aiohttp 15 s), so the client always retires a connection first:
# with hypercorn's default of 5 s, equal to httpx's, a request sent just as the server's timer fired
# was lost ("Server disconnected without sending a response"). nginx's default for clients is 75 s.
# A drain closes idle connections at once whatever this is.
KEEP_ALIVE_S = 75.0


def stream_cut_s(drain_timeout_s: float) -> float:
    """When, after the stop, open generations end with an error event: before hypercorn's own
    graceful timeout, so the event is still sent."""
    return max(0.0, drain_timeout_s - min(3.0, drain_timeout_s * 0.1))


class _BoundConfig(HypercornConfig):
    """Remembers the sockets hypercorn binds, so port 0 can be resolved for ready_cb."""

    bound: list[tuple[str, int]] | None = None

    def create_sockets(self) -> Any:
        sockets = super().create_sockets()
        self.bound = [s.getsockname()[:2] for s in sockets.insecure_sockets]
        return sockets


def is_engine(obj: Any) -> bool:
    """A served engine (AsyncEngine or an adapter: a server.served.ServedModel), not a model source."""
    return isinstance(obj, ServedModel)


@contextlib.asynccontextmanager
async def _engine_of(engine_or_source: Any, engine_config: EngineConfig | None, chat_template: str | None):
    """The engine to serve: an engine object as is, else open_engine's for the source."""
    if is_engine(engine_or_source):
        yield engine_or_source
        return
    async with open_engine(engine_or_source, engine_config, chat_template) as engine:
        yield engine


async def serve(
    engine_or_source: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    server_config: ServerConfig | None = None,
    engine_config: Any = None,
    ready_cb: Callable[[str, int], Any] | None = None,
    shutdown: anyio.Event | asyncio.Event | None = None,
    drain_timeout_s: float = 30.0,
    log_stream: IO[str] | None = None,
    install_signal_handlers: bool = True,
    models: Any = None,
    default_name: str | None = None,
    chat_template: str | None = None,
) -> None:
    """Serve until SIGINT/SIGTERM or `shutdown` is set. Raises ModelcError if the model fails to load.

    models: a modelc.server.manager.models.ModelManager to serve other models on demand beside this default
    one (requests name them in `model`); default_name: what requests may call the default model;
    chat_template: a Jinja source replacing the default model's own template (checked by the caller)."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ModelcError(f"port must be 0 (any free port) to 65535, got {port!r}")  # socket.bind: OverflowError
    state = ServerState(None, server_config or ServerConfig())
    check_bind(host, state.config)
    state.models = models
    app = create_app(state, log_stream=log_stream)
    hypercorn_close.install()  # a connection its client closed is closed at once, not after KEEP_ALIVE_S
    cfg = _BoundConfig()
    cfg.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    cfg.graceful_timeout = drain_timeout_s
    cfg.keep_alive_timeout = KEEP_ALIVE_S
    cfg.accesslog = None  # one structlog line per request instead
    cfg.errorlog = None
    stop = asyncio.Event()
    state.request_shutdown = stop.set
    loop = asyncio.get_running_loop()
    handled: list[int] = []
    watchdog: list[threading.Timer] = []

    def on_signal(sig: int) -> None:
        if stop.is_set():
            os._exit(128 + sig)  # a second signal: the user wants it gone now
        timer = threading.Timer(drain_timeout_s + DRAIN_GRACE_S, os._exit, (128 + sig,))
        timer.daemon = True
        timer.start()
        watchdog.append(timer)
        stop.set()

    if install_signal_handlers:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, on_signal, int(sig))
                handled.append(sig)
    errors: list[ModelcError] = []
    server_done = anyio.Event()

    async def _run_server() -> None:
        try:
            await hypercorn_serve(app, cfg, shutdown_trigger=stop.wait)
        except OSError as e:
            errors.append(ModelcError(f"cannot listen on {host}:{port}: {e.strerror or e}"))
        finally:
            server_done.set()

    async def _relay(event: Any) -> None:
        await event.wait()
        stop.set()

    async def _cut_streams() -> None:
        await stop.wait()
        await anyio.sleep(stream_cut_s(drain_timeout_s))
        interrupt_all(ShuttingDownError("the server is shutting down: the drain timeout ended this request"))

    try:
        async with anyio.create_task_group() as tg:
            if shutdown is not None:
                tg.start_soon(_relay, shutdown)
            await tg.start(run_host.serve)  # the engine pumps of every request (server/generation.py)
            tg.start_soon(_run_server)
            tg.start_soon(_cut_streams)
            if models is not None:
                await tg.start(models.run)
            try:
                async with _engine_of(engine_or_source, engine_config, chat_template) as engine:
                    if models is not None:
                        path = engine_or_source if isinstance(engine_or_source, str | Path) else None
                        models.set_default(engine, default_name, path)
                    state.engine = engine
                    while cfg.bound is None and not server_done.is_set():
                        await anyio.sleep(0.005)
                    if ready_cb is not None and cfg.bound and not server_done.is_set():
                        ready_cb(*cfg.bound[0])
                    await server_done.wait()  # draining happens inside hypercorn; the engine stays up
            except ModelcError as e:
                state.load_error = e.message
                errors.append(e)
                stop.set()
                await server_done.wait()
            tg.cancel_scope.cancel()
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
        for timer in watchdog:
            timer.cancel()
    if errors:
        raise errors[0]


def resolve_source(artifact: str) -> Any:
    """ARTIFACT of `modelc run`: a .modelc path or store name -> its path; raw weights (file or HF folder)
    -> an IR Model read in memory."""
    p = Path(artifact).expanduser()
    if p.is_dir():
        return _read_weights(p)
    path = store.resolve(artifact)
    if is_artifact(path):
        return path
    return _read_weights(path)


def _read_weights(path: Path) -> Any:
    from modelc.formats.detect import read_model  # lazy: the readers load only for a raw-weights file

    return read_model(path)
