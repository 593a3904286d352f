"""Context shift: re-rotated keys equal a fresh prefill at the new positions; endless generation; truncation."""

from __future__ import annotations

import anyio
import numpy as np
import pytest

from modelc.api.async_engine import AsyncEngine
from modelc.cache.kv_pages import BLOCK_SIZE as Z
from modelc.cache.kv_pages import KVPages
from modelc.config import CacheConfig, EngineConfig, SchedulerConfig
from modelc.errors import InvalidRequestError
from modelc.models.batch import make_batch
from modelc.models.registry import build_model
from modelc.models.tiny import make_tiny_llama, reference_logits
from modelc.request import SamplingParams
from modelc.scheduler.context_shift import plan_shift, truncate_prompt

TYPES = ["float32", "float16", "q8_0", "mixed"]


def _cos(a, b):
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def _shifted_logits(ir, kv_dtype, tokens, kb, db, nxt):
    """Prefill `tokens`, shift (drop blocks kb..kb+db, re-rotate the rest), decode `nxt`: its logits."""
    model = build_model(ir)
    L, K, D = model.kv_shape()
    kv = KVPages(L, 16, K, D, kv_dtype)
    table = np.arange(16, dtype=np.int32)
    batch = make_batch([(np.array(tokens, np.int32), 0, table)], logit_rows=np.zeros(0, np.int64))
    kv.prepare(batch.slots, [(table, 0, len(tokens))])
    model.forward(batch, kv)
    moved = table[kb + db :]
    model.shift_keys(kv, moved, -db * Z)
    new_table = np.concatenate([table[:kb], moved]).astype(np.int32)
    pos = len(tokens) - db * Z
    step = make_batch([(np.array([nxt], np.int32), pos, new_table)])
    kv.prepare(step.slots, [(new_table, pos, pos + 1)])
    return model.forward(step, kv)[0]


@pytest.mark.parametrize("kv_dtype", TYPES)
@pytest.mark.parametrize("num_layers", [1, 2])
def test_shifted_cache_matches_fresh_prefill_of_the_kept_tokens(kv_dtype, num_layers):
    ir = make_tiny_llama(7, num_layers=num_layers, hidden_size=128, num_heads=4, num_kv_heads=2)
    rng = np.random.default_rng(num_layers)
    tokens = [int(t) for t in rng.integers(3, 96, 100)]
    kb, db = 1, 3  # keep 16 tokens, drop 48
    got = _shifted_logits(ir, kv_dtype, tokens, kb, db, 42)
    kept = tokens[: kb * Z] + tokens[(kb + db) * Z :] + [42]
    want = reference_logits(ir, kept)[-1]
    # One layer: every K/V row is a function of its token and position only, so the shifted cache must
    # equal a fresh prefill (up to the KV type's rounding): this is what checks the re-rotation.
    # Two layers: the moved rows' layer-1 K/V were computed while the dropped tokens were in context,
    # which no re-rotation can undo (llama.cpp's shift has the same property): ~0.98 here.
    if num_layers == 1:
        assert _cos(got, want) >= (0.99999 if kv_dtype == "float32" else 0.999)
        if kv_dtype == "float32":
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    else:
        assert _cos(got, want) >= 0.95


def test_plan_and_truncate_rules():
    assert plan_shift(64, 63, 0, 16) == (1, 1)  # keep the first block, drop half of the other 48 (24 -> 1 block)
    assert plan_shift(64, 63, 40, 16) is None  # 3 kept blocks leave 16: half is less than a block
    assert plan_shift(128, 127, 5, 16) == (1, 3)
    toks = list(range(100))
    cut = truncate_prompt(toks, 64, 4)  # llama.cpp: blocks of (64 - 4) / 2 = 30 erased after the first 4
    assert cut == toks[:4] + toks[4 + 2 * 30 :] and len(cut) < 64
    with pytest.raises(InvalidRequestError):
        truncate_prompt(toks, 64, 70)


def _config(kv="float32", ctx=64, **sched):
    return EngineConfig(threads=1, cpu_count=2, cache=CacheConfig(kv_cache_tokens=512, kv_dtype=kv),
                        scheduler=SchedulerConfig(max_model_len=ctx, max_num_seqs=4, max_batch_tokens=64, **sched))  # fmt: skip


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("kv", TYPES)
async def test_generation_of_four_contexts_runs_to_the_end(kv, anyio_backend):
    model = make_tiny_llama(2)
    prompt = [int(t) for t in np.random.default_rng(3).integers(3, 96, 20)]
    with anyio.fail_after(120):
        async with AsyncEngine.open(model, _config(kv, anchor_tokens=4)) as eng:
            shifting = SamplingParams(temperature=0.0, max_tokens=256, ignore_eos=True, context_shift=True)
            evs = [ev async for ev in eng.generate(prompt, shifting)]
            assert len(evs) - 1 == 256 and evs[-1].finish_reason == "length"
            # OpenAI semantics (no shift): stops at the context with finish_reason "length"
            plain = SamplingParams(temperature=0.0, max_tokens=256, ignore_eos=True)
            evs2 = [ev async for ev in eng.generate(prompt, plain)]
            assert len(evs2) - 1 == 64 - 20 and evs2[-1].finish_reason == "length"
            assert [e.token_id for e in evs2[:-1]] == [e.token_id for e in evs[: len(evs2) - 1]]
            stats = eng.stats()
            assert stats["context_shifts"] >= 6 and stats["kv_blocks_used"] == 0


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_shift_with_a_shared_prefix_and_long_prompts(anyio_backend):
    """Two sequences share prompt blocks (prefix cache) and shift past them: copy-on-write keeps the other
    one's pages; a prompt over the context is a clear error, or truncated on request."""
    model = make_tiny_llama(2)
    prompt = [int(t) for t in np.random.default_rng(4).integers(3, 96, 50)]  # blocks 0-2 shared; block 2 moves
    p = SamplingParams(temperature=0.0, max_tokens=80, ignore_eos=True, context_shift=True)
    with anyio.fail_after(120):
        async with AsyncEngine.open(model, _config()) as eng:
            alone = [e.token_id for e in [ev async for ev in eng.generate(prompt, p)][:-1]]
            got: dict[int, list[int]] = {}

            async def one(i: int) -> None:
                got[i] = [e.token_id for e in [ev async for ev in eng.generate(prompt, p)][:-1]]

            async with anyio.create_task_group() as tg:
                for i in range(2):
                    tg.start_soon(one, i)
            assert got[0] == got[1] == alone and len(alone) == 80
            long = prompt[:40] * 3  # 120 tokens > 64
            with pytest.raises(InvalidRequestError, match="truncate"):
                async for _ in eng.generate(long, p):
                    pass
            evs = [
                ev
                async for ev in eng.generate(
                    long, SamplingParams(max_tokens=5, truncate=True, n_keep=4, ignore_eos=True)
                )
            ]
            assert evs[-1].prompt_tokens == 4 + 120 - 4 - 2 * 30 and len(evs) == 5  # 60 + 4 fill the context
            evs = [
                ev
                async for ev in eng.generate(
                    long, SamplingParams(max_tokens=9, truncate=True, context_shift=True, ignore_eos=True)
                )
            ]
            assert len(evs) == 10 and evs[-1].finish_reason == "length"
            assert eng.stats()["kv_blocks_used"] == 0


def test_request_fields_and_defaults():
    from modelc.cli.run_cmds import engine_config
    from modelc.server.schema import parse_sampling
    from modelc.server.state import GenerationDefaults

    d = GenerationDefaults()
    native = parse_sampling({"n_keep": -1, "max_context": 32}, d, vocab_size=96, native=True)
    assert native.context_shift and native.n_keep == -1 and native.max_context == 32
    openai = parse_sampling({"truncate": True}, d, vocab_size=96)
    assert not openai.context_shift and openai.truncate
    assert parse_sampling({"context_shift": True}, d, vocab_size=96).context_shift
    with pytest.raises(InvalidRequestError):
        parse_sampling({"max_context": 1}, d, vocab_size=96)
    cfg = engine_config(engines=1, threads=1, max_num_seqs=4, max_batch_tokens=64, max_queue=3, kv_cache_mb=None,
                        anchor_tokens=8)  # fmt: skip
    assert cfg.scheduler.anchor_tokens == 8


def test_ollama_options_shift_and_truncate_by_default():
    from modelc.server.ollama_shapes import sampling_params
    from modelc.server.state import GenerationDefaults

    p = sampling_params({"num_keep": 4, "num_ctx": 64}, GenerationDefaults(), 96)
    assert (p.n_keep, p.max_context, p.context_shift, p.truncate) == (4, 64, True, True)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_python_engine_shifts_like_the_scheduler(anyio_backend):
    from modelc.api.engine import Engine

    model = make_tiny_llama(2)
    prompt = [int(t) for t in np.random.default_rng(3).integers(3, 96, 20)]
    p = SamplingParams(temperature=0.0, max_tokens=150, ignore_eos=True, context_shift=True)
    sync = list(Engine(model, kv_cache_tokens=64).generate_ids(prompt, p))
    with anyio.fail_after(120):
        async with AsyncEngine.open(model, _config()) as eng:
            served = [e.token_id for e in [ev async for ev in eng.generate(prompt, p)][:-1]]
    assert len(sync) == 150 and sync == served
    plain = list(Engine(model, kv_cache_tokens=64).generate_ids(prompt, SamplingParams(temperature=0.0,
                                                                                        max_tokens=150)))  # fmt: skip
    assert len(plain) <= 64 - 20
    with pytest.raises(InvalidRequestError):
        list(Engine(model, kv_cache_tokens=64).generate_ids(prompt * 4, p))
    cut = list(Engine(model, kv_cache_tokens=64).generate_ids(prompt * 4, SamplingParams(max_tokens=3, truncate=True)))
    assert len(cut) <= 3
