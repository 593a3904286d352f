"""modelc's own server in a background thread of this process, on 127.0.0.1 and a free port.

`with ServerThread(source, engine_config=...) as srv: srv.url` runs modelc.server.daemon.serve on its
own asyncio loop in a daemon thread, waits until it answers, and stops it (drain, engine closed) on exit.
The load driver keeps its own loop in the caller's thread, so client and server do not share a loop.
"""

from __future__ import annotations

import asyncio
import io
import threading
from typing import Any

from modelc.errors import ModelcError


class ServerThread:
    """One in-process server. `log` collects the server's JSON request lines (one per request)."""

    def __init__(
        self,
        source: Any,
        *,
        engine_config: Any = None,
        server_config: Any = None,
        host: str = "127.0.0.1",
        start_timeout_s: float = 600.0,
        drain_timeout_s: float = 5.0,
    ) -> None:
        self.source = source
        self.engine_config = engine_config
        self.server_config = server_config
        self.host = host
        self.start_timeout_s = start_timeout_s
        self.drain_timeout_s = drain_timeout_s
        self.log = io.StringIO()
        self.port: int | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._engine: Any = None
        self._thread = threading.Thread(target=self._main, name="modelc-server", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def engine(self) -> Any:
        """The served engine (AsyncEngine or adapter); None before it is up."""
        return self._engine

    def engine_stats(self) -> dict[str, Any]:
        """The served engine's stats() read directly (no HTTP); {} before it is up."""
        return dict(self._engine.stats()) if self._engine is not None else {}

    def run_in_loop(self, coro: Any) -> Any:
        """Schedule a coroutine on the server's event loop; a concurrent.futures.Future of its result."""
        if self._loop is None:
            raise ModelcError("the in-process server is not running")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as e:  # reported to the starting thread (or on stop)
            self._error = e
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        from modelc.api.opener import open_engine
        from modelc.server import daemon

        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()

        def ready(host: str, port: int) -> None:
            self.port = port
            self._ready.set()

        async with open_engine(self.source, self.engine_config) as engine:
            self._engine = engine
            await daemon.serve(
                engine,
                host=self.host,
                port=0,
                server_config=self.server_config,
                ready_cb=ready,
                shutdown=self._stop,
                drain_timeout_s=self.drain_timeout_s,
                log_stream=self.log,
                install_signal_handlers=False,
            )

    def start(self) -> ServerThread:
        self._thread.start()
        if not self._ready.wait(self.start_timeout_s):
            self.stop()
            raise ModelcError(f"the in-process server did not start within {self.start_timeout_s:.0f} s")
        if self._error is not None or self.port is None:
            err = self._error
            if isinstance(err, ModelcError):
                raise err
            raise ModelcError(f"the in-process server failed to start: {type(err).__name__}: {err}") from err
        return self

    def stop(self, timeout_s: float = 60.0) -> None:
        """Ask the server to stop and wait for its thread; raises what the server raised, if anything."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop closed in between
                pass
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise ModelcError(f"the in-process server did not stop within {timeout_s:.0f} s")
        if self._error is not None and not isinstance(self._error, asyncio.CancelledError):
            err, self._error = self._error, None
            if isinstance(err, ModelcError):
                raise err
            raise ModelcError(f"the in-process server failed: {type(err).__name__}: {err}") from err

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
