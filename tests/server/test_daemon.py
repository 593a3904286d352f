"""serve() in-process: ready callback with the bound port, 503 while loading, shutdown event, bind errors."""

from __future__ import annotations

import contextlib
import socket

import anyio
import httpx
import pytest

from modelc.errors import ModelcError
from modelc.server import daemon
from modelc.server.state import ServerConfig
from tests.server.fake_engine import FakeEngine

pytestmark = pytest.mark.anyio


async def test_serve_ready_and_shutdown() -> None:
    stop = anyio.Event()
    bound: list[tuple[str, int]] = []
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                lambda: daemon.serve(
                    FakeEngine(),
                    port=0,
                    shutdown=stop,
                    ready_cb=lambda h, p: bound.append((h, p)),
                    install_signal_handlers=False,
                    server_config=ServerConfig(log_requests=False),
                )
            )
            while not bound:
                await anyio.sleep(0.01)
            host, port = bound[0]
            assert host == "127.0.0.1" and port > 0
            async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as c:
                assert (await c.get("/health")).json()["status"] == "ok"
                r = await c.post("/v1/completions", json={"prompt": "x", "max_tokens": 2})
                assert r.json()["usage"]["completion_tokens"] == 2
            stop.set()


async def test_health_503_while_engine_loads(monkeypatch) -> None:
    loaded = anyio.Event()
    release = anyio.Event()

    @contextlib.asynccontextmanager
    async def slow_open(source, config=None, chat_template=None):
        loaded.set()
        await release.wait()
        yield FakeEngine()

    monkeypatch.setattr(daemon, "open_engine", slow_open)
    cfg = daemon._BoundConfig
    seen: dict[str, int] = {}
    orig = cfg.create_sockets

    def spy(self):
        sockets = orig(self)
        seen["port"] = self.bound[0][1]
        return sockets

    monkeypatch.setattr(cfg, "create_sockets", spy)
    stop = anyio.Event()
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: daemon.serve("some.modelc", port=0, shutdown=stop, install_signal_handlers=False))
            await loaded.wait()
            while "port" not in seen:
                await anyio.sleep(0.01)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{seen['port']}") as c:
                for _ in range(200):
                    try:
                        r = await c.get("/health")
                        break
                    except httpx.ConnectError:
                        await anyio.sleep(0.01)
                assert r.status_code == 503 and r.json()["status"] == "loading"
                release.set()
                for _ in range(200):
                    if (await c.get("/health")).status_code == 200:
                        break
                    await anyio.sleep(0.01)
                assert (await c.get("/health")).status_code == 200
            stop.set()


async def test_port_in_use_is_a_clear_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with anyio.fail_after(30), pytest.raises(ModelcError, match=f"cannot listen on 127.0.0.1:{port}"):
            await daemon.serve(FakeEngine(), port=port, install_signal_handlers=False)


async def test_load_failure_raises(tmp_path) -> None:
    bad = tmp_path / "bad.modelc"
    bad.write_bytes(b"MODELC\0\0garbage")
    with anyio.fail_after(30), pytest.raises(ModelcError):
        await daemon.serve(str(bad), port=0, install_signal_handlers=False)


@pytest.mark.parametrize("port", [-1, 65536, 99999])
async def test_a_port_out_of_range_is_a_clear_error(port) -> None:
    """socket.bind raises OverflowError (not OSError) for these: `modelc run --port 99999` loaded the model, then
    ended in 'error: internal error: ExceptionGroup: unhandled errors in a TaskGroup'."""
    with anyio.fail_after(30), pytest.raises(ModelcError, match=f"port must be 0 .* to 65535, got {port}"):
        await daemon.serve(FakeEngine(), port=port, install_signal_handlers=False)
