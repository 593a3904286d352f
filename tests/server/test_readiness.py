"""/health answers 503 {"status": "loading"} until the model is loaded and a request can run without
compiling: from the first 200 on, no request compiles (or loads from numba's cache) any kernel on the
threads that serve it. With a warm cache every kernel is loaded before the 200; from an empty cache
(cold) the first requests run on the reference kernels while the "modelc-warmer" thread compiles.

Model kinds: "tiny" (a llama), "softcap" (Gemma 2's attention soft-capping), "sinks" (gpt-oss's attention
sinks and MoE), "draft" (speculative decoding with a draft model) serve cold on the reference kernels;
"q8_0" (the int8 KV cache, whose kernels the KV pages call directly), "bert" (an encoder) and "mlp" / "onnx" (a
quantized MLP, a BERT graph behind /infer) compile or load every kernel before the 200 instead."""

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
from modelc.config import CacheConfig, EngineConfig, SchedulerConfig
from modelc.server.daemon import serve

kind = sys.argv[2]
VARIANTS = sys.argv[1] + "/tests/fixtures/models/variants/"
model, draft, kv_dtype = make_served_model(), None, "float32"
if kind in ("softcap", "sinks"):
    from modelc.formats.detect import read_model
    model = read_model(VARIANTS + ("gemma2" if kind == "softcap" else "gpt-oss") + "/hf")
elif kind == "draft":
    draft = make_served_model(1)
elif kind == "q8_0":
    kv_dtype = "q8_0"
elif kind == "bert":
    from modelc.formats.detect import read_model
    model = read_model(sys.argv[1] + "/tests/fixtures/embeddings/tiny_bert")
elif kind == "onnx":  # a BERT graph behind /infer: two named inputs, numba kernels in its ops
    from modelc.formats.detect import read_model
    model = read_model(sys.argv[1] + "/tests/fixtures/onnx/tiny_bert.onnx")
elif kind == "mlp":  # Q8_0 layers: /infer runs numba matmuls
    import numpy as np
    from modelc.ir import DataType, Model, TensorData
    from modelc.kernels.matmul.gemm_random import random_tensor
    rng = np.random.default_rng(0)
    t = {"layer0.weight": random_tensor(DataType.Q8_0, 64, 64, rng),
         "layer0.bias": TensorData.from_array(np.zeros(64, np.float32)),
         "layer1.weight": random_tensor(DataType.Q8_0, 32, 64, rng)}
    model = Model("mlp-q8", "mlp", t)

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
            if kind == "mlp":
                for body in ({"input": [0.5] * 64}, {"inputs": [[0.5] * 64] * 3}, {"inputs": [[0.5] * 64] * 40}):
                    r = await c.post("/infer", json=body)
                    assert r.status_code == 200, r.text
            elif kind == "onnx":
                for n in (3, 40):
                    body = {"inputs": {"input_ids": [list(range(1, n + 1))], "attention_mask": [[1] * n]}}
                    r = await c.post("/infer", json=body)
                    assert r.status_code == 200, r.text
            elif kind == "bert":  # token ids: the fixture has no tokenizer; the longer input is a batch
                for ids in ([5, 6, 7], [[5, 6], list(range(5, 40))]):
                    r = await c.post("/v1/embeddings", json={"input": ids})
                    assert r.status_code == 200, r.text
            else:
                long = "def fibonacci(n):" * 5  # past the BLAS prefill threshold
                for prompt, n in (("abc", 4), (long, 3), (["ab", "cd"], 3)):
                    r = await c.post("/v1/completions", json={"prompt": prompt, "max_tokens": n, "temperature": 0})
                    assert r.status_code == 200, r.text
            if kind == "tiny":
                r = await c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                                "max_tokens": 3, "stream": True})
                assert r.status_code == 200, r.text
            print("SEEN", sorted(set(seen)))
            print("SERVING THREADS LOADED", sorted({x for x in loads if x[0] != "modelc-warmer"}))
            print("KERNELS AFTER REQUESTS", (await c.get("/health")).json().get("kernels"))
        stop.set()
    async with anyio.create_task_group() as tg:
        tg.start_soon(poll)
        cfg = EngineConfig(threads=1, cache=CacheConfig(kv_cache_tokens=2048, kv_dtype=kv_dtype), draft=draft,
                           scheduler=SchedulerConfig(speculative="draft" if draft is not None else None))
        await serve(model, port=port, engine_config=cfg, shutdown=stop, install_signal_handlers=False)

anyio.run(main)
"""


def _probe(kind: str, cache: str, tmp_path: pathlib.Path) -> str:
    root = str(pathlib.Path(__file__).resolve().parents[2])
    env = {**os.environ, **({"NUMBA_CACHE_DIR": str(tmp_path / "numba"), "MODELC_KERNEL_PACKS": "0"} if cache == "cold" else {})}
    out = subprocess.run([sys.executable, "-c", _PROBE, root, kind], capture_output=True, text=True, timeout=900,
                         env=env)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "SERVING THREADS LOADED []" in out.stdout, out.stdout
    seen = out.stdout.split("SEEN ")[1].splitlines()[0]
    assert "(200, 'ok')" in seen, seen
    return out.stdout


@pytest.mark.parametrize("cache", ["warm", "cold"])
def test_health_is_503_until_the_first_request_compiles_nothing(cache, tmp_path):
    out = _probe("tiny", cache, tmp_path)
    if cache == "cold":  # served before numba had compiled everything: on the reference kernels
        assert "KERNELS AFTER REQUESTS compiling" in out, out
    seen = out.split("SEEN ")[1].splitlines()[0]
    # loading every kernel takes a moment; a cold start can be ready before the first poll (the shared cache
    # is cold too after any kernel edit: a new folder)
    if cache == "warm" and "KERNELS AFTER REQUESTS compiling" not in out:
        assert "(503, 'loading')" in seen, seen


@pytest.mark.parametrize("kind", ["softcap", "sinks", "draft"])
def test_soft_capping_sinks_and_draft_models_serve_cold_without_compiling(kind, tmp_path):
    """From an empty cache these serve at once on the reference kernels (soft-capping / sinks attention
    through the KernelSet's paged_attention_ext; the draft model on the target's hybrid set)."""
    out = _probe(kind, "cold", tmp_path)
    assert "KERNELS AFTER REQUESTS compiling" in out, out


@pytest.mark.slow  # loads every kernel of the model before the 200 (compiles what the shared cache lacks: minutes)
@pytest.mark.parametrize("kind", ["q8_0", "bert", "mlp", "onnx"])
def test_q8_kv_cache_encoder_and_infer_models_are_503_until_warm(kind, tmp_path):
    """The shared kernel cache, not an empty one: "before the 200" is the same whether the kernels load or compile
    (the probe records both), and an empty cache cost CI 4-6 minutes of compiles for the q8_0 and mlp kinds."""
    out = _probe(kind, "warm", tmp_path)
    assert "KERNELS AFTER REQUESTS ready" in out, out
    seen = out.split("SEEN ")[1].splitlines()[0]
    assert "(503, 'loading')" in seen, seen
