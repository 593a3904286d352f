"""Every KV cache type end to end: close to f32 logits, prefix-cache hits reproduce the first run, blocks return."""

from __future__ import annotations

import anyio
import numpy as np
import pytest

from modelc.api.async_engine import AsyncEngine
from modelc.api.engine import Engine
from modelc.config import CacheConfig, EngineConfig, SchedulerConfig, resolve_kv_dtype
from modelc.errors import InvalidRequestError
from modelc.models.tiny import make_tiny_llama
from modelc.request import SamplingParams

TYPES = ["float32", "float16", "q8_0", "mixed"]


@pytest.fixture(scope="module")
def model():
    return make_tiny_llama(5, hidden_size=128, num_heads=4, num_kv_heads=2)  # D = 32: one q8_0 block per row


def _cos(a, b):
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.mark.parametrize("kv", TYPES)
def test_logits_close_to_f32_kv(model, kv):
    ids = list(np.random.default_rng(0).integers(3, 96, 150))
    want = Engine(model, kv_dtype="f32").logits(ids)
    got = Engine(model, kv_dtype=kv).logits(ids)
    assert _cos(got, want) > 0.999
    # decode through the paged runner equals the scratch forward's last row closely
    eng = Engine(model, kv_dtype=kv, kv_cache_tokens=256)
    toks = list(eng.generate_ids(ids, SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)))
    assert len(toks) == 4 and toks[0] == int(np.argmax(got[-1]))


def test_aliases_and_bad_type():
    assert CacheConfig(kv_dtype="q8").kv_dtype == "q8_0" and CacheConfig(kv_dtype="f16").kv_dtype == "float16"
    assert CacheConfig().kv_dtype == "auto" and CacheConfig(kv_dtype="AUTO").kv_dtype == "auto"
    with pytest.raises(InvalidRequestError, match="q8_0"):
        CacheConfig(kv_dtype="int3")


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("kv", TYPES)
async def test_prefix_hit_reproduces_first_run(model, kv, anyio_backend):
    """The prompt (130 tokens) reaches past the mixed cache's 64-token window, so the cached pages are read
    both as int8 (old) and f32 (recent) after the hit, exactly as in the first run."""
    cfg = EngineConfig(threads=1, cpu_count=2, cache=CacheConfig(kv_cache_tokens=1024, kv_dtype=kv),
                       scheduler=SchedulerConfig(max_batch_tokens=64, max_num_seqs=4))  # fmt: skip
    prompt = [int(t) for t in np.random.default_rng(1).integers(3, 96, 130)]
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    with anyio.fail_after(120):
        async with AsyncEngine.open(model, cfg) as eng:
            runs = []
            for _ in range(2):
                evs = [ev async for ev in eng.generate(prompt, params)]
                runs.append(([e.token_id for e in evs[:-1]], evs[-1]))
            assert runs[1][0] == runs[0][0] and runs[1][1].cached_tokens >= 112
            stats = eng.stats()
            assert stats["kv_blocks_used"] == 0 and stats["prefix_hits"] > 0
    alone = list(Engine(model, kv_dtype=kv, kv_cache_tokens=512).generate_ids(prompt, params))
    assert alone == runs[0][0]  # mixed too: chunked prefill (64-token steps) reads the rows one pass reads


def test_auto_is_f16_for_quantized_matrices_and_f32_for_float_ones():
    from modelc.artifact.transforms import plan

    flt = make_tiny_llama(2)
    q4 = make_tiny_llama(2)
    q4.tensors, _ = plan(q4.tensors, prune=None, quantize="q4_0", quantize_embeddings=False, quantize_output=False)
    assert resolve_kv_dtype("auto", flt) == "float32" and resolve_kv_dtype("auto", q4) == "float16"
    assert resolve_kv_dtype("f32", q4) == "float32" and resolve_kv_dtype("q8", flt) == "q8_0"
    assert Engine(flt).runner.kv.kv_dtype == "float32" and Engine(q4).runner.kv.kv_dtype == "float16"
    assert Engine(q4, kv_dtype="f32").runner.kv.kv_dtype == "float32"
    with pytest.raises(InvalidRequestError, match="auto"):
        resolve_kv_dtype("f8", q4)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_engine_config_reports_the_resolved_type(anyio_backend):
    from modelc.artifact.transforms import plan

    q4 = make_tiny_llama(2)
    q4.tensors, _ = plan(q4.tensors, prune=None, quantize="q4_0", quantize_embeddings=False, quantize_output=False)
    cfg = EngineConfig(threads=1, cpu_count=2, cache=CacheConfig(kv_cache_tokens=256))
    with anyio.fail_after(120):
        async with AsyncEngine.open(q4, cfg) as eng:
            assert eng.config.cache.kv_dtype == "float16"
