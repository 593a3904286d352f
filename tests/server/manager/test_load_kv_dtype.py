"""/api/load's options.kv_cache_dtype: the model opens with that KV cache type; a clash is a 400."""

from __future__ import annotations

import contextlib
import io
from typing import Any

import anyio
import pytest

from modelc.server.app import create_app
from modelc.server.manager.models import ModelManager
from modelc.server.state import ServerConfig, ServerState
from tests.server.fake_engine import FakeEngine
from tests.server.manager.conftest import FakeOpener
from tests.server.manager.test_ollama_routes import TOKEN, TokenClient

pytestmark = pytest.mark.anyio


class RecordingOpener(FakeOpener):
    def __init__(self) -> None:
        super().__init__()
        self.configs: dict[str, Any] = {}

    def __call__(self, path: Any, config: Any = None):
        from pathlib import Path

        self.configs[Path(path).stem] = config
        return super().__call__(path, config)


async def test_load_with_kv_cache_dtype(home) -> None:
    opener = RecordingOpener()
    manager = ModelManager(opener=opener, tick_s=0.02, grace_s=0.05)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            await tg.start(manager.run)
            manager.set_default(FakeEngine(name="main"), "main")
            state = ServerState(FakeEngine(name="main"), ServerConfig(log_requests=False, control_token=TOKEN))
            state.models = manager
            c = TokenClient(create_app(state, log_stream=io.StringIO()).test_client(), TOKEN)
            r = await c.post("/api/load", json={"model": "alpha", "options": {"kv_cache_dtype": "q8_0"}})
            assert r.status_code == 200
            assert opener.configs["alpha"].cache.kv_dtype == "q8_0"
            r = await c.post("/api/load", json={"model": "alpha", "options": {"kv_cache_dtype": "q8_0"}})
            assert r.status_code == 200 and opener.opened == ["alpha"]
            r = await c.post("/api/load", json={"model": "alpha", "options": {"kv_cache_dtype": "f16"}})
            body = await r.get_json()
            assert r.status_code == 400 and "unload it first" in body["error"]  # Ollama-shaped error
            r = await c.post("/api/load", json={"model": "beta", "options": {"kv_cache_dtype": "int3"}})
            assert r.status_code == 400 and opener.opened == ["alpha"]
            assert (await c.post("/api/load", json={"model": "beta"})).status_code == 200
            assert opener.configs["beta"] is None  # the daemon's own engine config
            with contextlib.suppress(Exception):
                tg.cancel_scope.cancel()
