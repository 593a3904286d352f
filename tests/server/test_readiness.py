"""/health answers 503 {"status": "loading"} until the model is loaded and a request can run without
compiling: from the first 200 on, no request compiles (or loads from numba's cache) any kernel on the
threads that serve it. With a warm cache every kernel is loaded before the 200; from an empty cache
(cold) the first requests run on the reference kernels while the "modelc-warmer" thread compiles."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

_PROBE = """
import socket, sys
import threading
import anyio, httpx
from numba.core.dispatcher import _DispatcherBase
sys.path.insert(0, sys.argv[1])
from tests.server.tiny_model import make_served_model
from modelc.config import CacheConfig, EngineConfig
from modelc.server.daemon import serve

# every compile or cache load after the first 200, by thread (the hybrid kernels' refusals never get here)
after_ready, loads = [False], []
_orig = _DispatcherBase._compile_for_args
def _record(self, *args, **kws):
    if after_ready[0]:
        loads.append((threading.current_thread().name, self.py_func.__qualname__))
    return _orig(self, *args, **kws)
_DispatcherBase._compile_for_args = _record

with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
url = f"http://127.0.0.1:{port}"

async def main():
    stop = anyio.Event()
    seen = []
    async def poll():
        async with httpx.AsyncClient(base_url=url, timeout=60) as c:
            while True:
                try:
                    r = await c.get("/health")
                except httpx.TransportError:
                    await anyio.sleep(0.02)
                    continue
                seen.append((r.status_code, r.json()["status"]))
                if r.status_code == 200:
                    after_ready[0] = True
                    break
                await anyio.sleep(0.02)
            long = "def fibonacci(n):" * 5  # past the BLAS prefill threshold
            for prompt, n in (("abc", 4), (long, 3)):
                r = await c.post("/v1/completions", json={"prompt": prompt, "max_tokens": n, "temperature": 0})
                assert r.status_code == 200, r.text
            r = await c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                            "max_tokens": 3, "stream": True})
            assert r.status_code == 200, r.text
            print("SEEN", sorted(set(seen)))
            print("SERVING THREADS LOADED", sorted({x for x in loads if x[0] != "modelc-warmer"}))
            print("KERNELS AFTER REQUESTS", (await c.get("/health")).json()["kernels"])
        stop.set()
    async with anyio.create_task_group() as tg:
        tg.start_soon(poll)
        cfg = EngineConfig(threads=1, cache=CacheConfig(kv_cache_tokens=2048))
        await serve(make_served_model(), port=port, engine_config=cfg, shutdown=stop, install_signal_handlers=False)

anyio.run(main)
"""


@pytest.mark.parametrize("cache", ["warm", "cold"])
def test_health_is_503_until_the_first_request_compiles_nothing(cache, tmp_path):
    root = str(pathlib.Path(__file__).resolve().parents[2])
    env = {**os.environ, **({"NUMBA_CACHE_DIR": str(tmp_path / "numba")} if cache == "cold" else {})}
    out = subprocess.run([sys.executable, "-c", _PROBE, root], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "SERVING THREADS LOADED []" in out.stdout, out.stdout
    if cache == "cold":  # served before numba had compiled everything: on the reference kernels
        assert "KERNELS AFTER REQUESTS compiling" in out.stdout, out.stdout
    seen = out.stdout.split("SEEN ")[1].splitlines()[0]
    assert "(200, 'ok')" in seen, seen
    if cache == "warm":  # loading every kernel takes a moment; a cold start can be ready before the first poll
        assert "(503, 'loading')" in seen, seen
