"""/health answers 503 {"status": "loading"} until the model is loaded AND its kernels are compiled:
the first request after the first 200 compiles (or loads from numba's cache) no kernel at all."""

from __future__ import annotations

import pathlib
import subprocess
import sys

_PROBE = """
import socket, sys
import anyio, httpx
from numba.core.registry import CPUDispatcher
sys.path.insert(0, sys.argv[1])
from tests.server.tiny_model import make_served_model
from modelc.config import CacheConfig, EngineConfig
from modelc.server.daemon import serve

def signatures():
    return {f"{n}.{a}": len(o.signatures) for n, m in list(sys.modules.items()) if n.startswith("modelc.")
            and m is not None for a, o in vars(m).items() if isinstance(o, CPUDispatcher)}

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
                    break
                await anyio.sleep(0.02)
            before = signatures()
            long = "def fibonacci(n):" * 5  # past the BLAS prefill threshold
            for prompt, n in (("abc", 4), (long, 3)):
                r = await c.post("/v1/completions", json={"prompt": prompt, "max_tokens": n, "temperature": 0})
                assert r.status_code == 200, r.text
            r = await c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                            "max_tokens": 3, "stream": True})
            assert r.status_code == 200, r.text
            grew = {k: (before.get(k, 0), v) for k, v in signatures().items() if v > before.get(k, 0)}
            print("SEEN", sorted(set(seen)))
            print("GREW", grew)
        stop.set()
    async with anyio.create_task_group() as tg:
        tg.start_soon(poll)
        cfg = EngineConfig(threads=1, cache=CacheConfig(kv_cache_tokens=2048))
        await serve(make_served_model(), port=port, engine_config=cfg, shutdown=stop, install_signal_handlers=False)

anyio.run(main)
"""


def test_health_is_503_until_the_first_request_compiles_nothing():
    root = str(pathlib.Path(__file__).resolve().parents[2])
    out = subprocess.run([sys.executable, "-c", _PROBE, root], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "GREW {}" in out.stdout, out.stdout
    seen = out.stdout.split("SEEN ")[1].splitlines()[0]
    assert "(503, 'loading')" in seen and "(200, 'ok')" in seen, seen
