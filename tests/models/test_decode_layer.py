"""A decode step through kernels/decode_layer.py (models/llama_decode.py), one stream or several in lockstep, gives
the same logits, bit for bit, as the forward's general per-kernel path: the same kernels on the same arrays in
the same order."""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np
import pytest

from modelc.api.engine import Engine
from modelc.kernels import decode_layer, moe_ffn
from modelc.models import llama_decode
from modelc.request import SamplingParams

QUANT = pathlib.Path(__file__).parents[1] / "fixtures/models/quant"


def _engine(name: str, kv_dtype: str) -> Engine:
    return Engine.load(QUANT / name, threads=2, kv_cache_tokens=256, kv_dtype=kv_dtype)


def _decode_logits(eng: Engine, fast: bool, n: int = 12) -> tuple[list[int], list[np.ndarray]]:
    """Greedy tokens and every one-token step's logits, with the fused layers on or off."""
    m = eng.runner.model
    plans = m.decode_plans
    got: list[np.ndarray] = []
    real = m.forward

    def forward(batch, kv, **kw):
        out = real(batch, kv, **kw)
        if batch.num_tokens == 1:
            got.append(out.copy())
        return out

    m.forward = forward
    if not fast:
        m.decode_plans = None
    try:
        ids = [1, *np.random.default_rng(0).integers(3, eng.runner.vocab_size, 20).tolist()]
        toks = list(eng.generate_ids(ids, SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)))
    finally:
        m.forward, m.decode_plans = real, plans
    return toks, got


def _assert_same(eng: Engine) -> None:
    fast_toks, fast = _decode_logits(eng, True)
    slow_toks, slow = _decode_logits(eng, False)
    assert fast_toks == slow_toks and len(fast) == len(slow) > 0
    for a, b in zip(fast, slow, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    ("name", "kv_dtype"),
    [("llama/model-Q4_K_M.gguf", "f16"), ("llama/model-Q4_0.gguf", "f32"), ("llama/model-Q8_0.gguf", "f16"),
     ("llama/model-Q5_K_M.gguf", "f16"), ("llama/model-IQ4_XS.gguf", "f16"),
     ("qwen3moe/model-Q4_K_M.gguf", "f16"), ("qwen3moe/model-Q4_0.gguf", "f32")],
)  # fmt: skip
def test_fused_layers_match_the_general_path_bit_for_bit(name: str, kv_dtype: str) -> None:
    eng = _engine(name, kv_dtype)
    plans = eng.runner.model.decode_plans
    if plans is None:
        assert "Q8_0" in name or "IQ4" in name  # on gemm_r16 only with an exact wide dot (VNNI)
        pytest.skip("these weights are not on the gemm_r16 path on this CPU")
    assert all(p is not None for p in plans)  # every layer of these plain models qualifies
    if name.startswith("qwen3moe"):
        assert all(p.mlp is None for p in plans)  # the experts run after the attention half
        # K-quant experts: moe_ffn's kernel called straight from forward; Q4_0 ones: MoeFFN.forward's expert loop
        assert all((p.moe is not None) == ("Q4_K_M" in name) for p in plans)
        assert all(p.heads[3].size for p in plans)  # Qwen3's per-head q/k norms
    if "Q4_K_M" in name:  # attn_v is Q6_K: v runs as its own matmul after the fused q/k run
        assert all(p.qkv[6] == decode_layer.R16 and p.qkv[10] == decode_layer.NONE for p in plans)
    if "Q5_K_M" in name or "IQ4_XS" in name:  # Q5_K projections: gemm_fused_k's kernel on the file's blocks
        assert any(decode_layer.MATVEC_K in (p.qkv[2], p.qkv[6], p.qkv[10], p.out[2]) for p in plans)
    _assert_same(eng)


def _batched_logits(eng: Engine, fast: bool, streams: int = 5, steps: int = 6) -> tuple[list[np.ndarray], int]:
    """The logits of every forward in which all `streams` sequences (prompts of different lengths) decode one
    token each, with the fused layers on or off; and how many attention halves ran at more than one token."""
    from modelc.cache.block_pool import BlockPool
    from modelc.engine.core import EngineCore
    from modelc.scheduler.scheduler import Scheduler
    from modelc.scheduler.sequence import Sequence

    m = eng.runner.model
    plans, real, real_half = m.decode_plans, m.forward, decode_layer.attention_half
    got: list[np.ndarray] = []
    wide = [0]

    def forward(batch, kv, **kw):
        out = real(batch, kv, **kw)
        if batch.num_tokens == batch.num_seqs == streams:
            got.append(out.copy())
        return out

    def half(x, *args):
        wide[0] += x.shape[0] > 1
        return real_half(x, *args)

    config = dataclasses.replace(eng.core.scheduler.config, max_num_seqs=streams, max_queue=streams)
    core = EngineCore(Scheduler(config, BlockPool(eng.runner.num_kv_blocks, enable_prefix_caching=False)), eng.runner)
    rng = np.random.default_rng(2)
    params = SamplingParams(max_tokens=steps, temperature=0.0, ignore_eos=True)
    m.forward, decode_layer.attention_half = forward, half
    if not fast:
        m.decode_plans = None
    try:
        for i in range(streams):
            core.add(Sequence(i, [1, *rng.integers(3, eng.runner.vocab_size, 6 + 5 * i).tolist()], params))
        while core.has_work:
            core.step()
    finally:
        m.forward, m.decode_plans, decode_layer.attention_half = real, plans, real_half
    return got, wide[0]


@pytest.mark.parametrize(
    ("name", "kv_dtype"),
    [("llama/model-Q4_K_M.gguf", "f16"), ("llama/model-Q4_0.gguf", "f32"), ("qwen3moe/model-Q4_K_M.gguf", "f16")],
)
def test_streams_in_lockstep_take_the_fused_layers_bit_for_bit(name: str, kv_dtype: str) -> None:
    eng = _engine(name, kv_dtype)
    plans = eng.runner.model.decode_plans
    assert plans is not None and all(p is not None and p.max_t >= 5 for p in plans)
    if name.startswith("qwen3moe"):
        assert all(p.max_t <= moe_ffn.FUSED_MAX_T for p in plans)  # the experts' one call stops there
    fast, wide = _batched_logits(eng, True)
    slow, none = _batched_logits(eng, False)
    assert len(fast) == len(slow) >= 4 and wide >= len(fast) * len(plans) and none == 0
    for a, b in zip(fast, slow, strict=True):
        np.testing.assert_array_equal(a, b)


def _assert_same_batched(eng: Engine, streams: int = 4) -> None:
    fast, wide = _batched_logits(eng, True, streams=streams, steps=4)
    slow, _ = _batched_logits(eng, False, streams=streams, steps=4)
    assert len(fast) == len(slow) >= 2 and wide > 0
    for a, b in zip(fast, slow, strict=True):
        np.testing.assert_array_equal(a, b)


def test_sliding_windows_shorter_than_the_context_match_at_one_and_more_tokens() -> None:
    eng = _engine("llama/model-Q4_0.gguf", "f16")
    m = eng.runner.model
    m.args = dataclasses.replace(m.args, layer_windows=tuple(5 + 2 * i for i in range(m.args.num_layers)))
    m.decode_plans = llama_decode.plan_layers(m)  # prompts of 6-26 tokens: every window slides
    assert all(p is not None and p.window == 5 + 2 * i for i, p in enumerate(m.decode_plans))
    _assert_same(eng)
    _assert_same_batched(eng)


def test_one_token_paths_stop_the_fused_layers_at_one_token() -> None:
    eng = _engine("llama/model-Q5_K_M.gguf", "f16")  # Q5_K: gemm_fused_k's one-token kernel; more tokens: rows
    plans = eng.runner.model.decode_plans
    assert plans is not None
    one = [p for p in plans if p is not None and decode_layer.MATVEC_K in (p.qkv[2], p.qkv[6], p.qkv[10], p.out[2])]
    assert one and all(p.max_t == 1 for p in one)
    eng = _engine("qwen3moe/model-Q4_0.gguf", "f16")  # Q4_0 experts: MoeFFN.forward's loop, grouped at T > 1
    assert all(p.max_t == 1 for p in eng.runner.model.decode_plans)
    fast, wide = _batched_logits(eng, True, streams=3, steps=3)
    assert fast and wide == 0


def test_a_projection_on_neither_path_keeps_the_layer_general() -> None:
    eng = _engine("llama/model-Q5_0.gguf", "f16")  # Q5_0: gemm_int's rows kernel at T = 1
    assert eng.runner.model.decode_plans is None


def _two_layer_q4_0(tmp_path: pathlib.Path) -> Engine:
    from modelc.ir import DataType
    from modelc.pack import pack
    from tests.formats.test_gguf_iquant import LAYERS, _tensors, _write

    assert LAYERS >= 2
    _write(tmp_path / "q.gguf", _tensors(DataType.Q4_0))
    eng = Engine.load(pack(tmp_path / "q.gguf", out=tmp_path / "q.modelc"), threads=2, kv_cache_tokens=256)
    assert eng.runner.model.decode_plans is not None and all(p is not None for p in eng.runner.model.decode_plans)
    return eng


def test_projection_biases_are_added_as_the_general_path_adds_them(tmp_path: pathlib.Path) -> None:
    eng = _two_layer_q4_0(tmp_path)
    m = eng.runner.model
    rng = np.random.default_rng(1)
    for L in m.layers:  # Qwen2's q/k/v biases, and llama's attention_bias / mlp_bias ones
        for name in ("q", "k", "v", "o", "gate", "up", "down"):
            setattr(L, name + "_bias", (0.05 * rng.standard_normal(getattr(L, name).rows)).astype(np.float32))
    m.decode_plans = llama_decode.plan_layers(m)
    assert all(p is not None and p.qkv[-1].size and p.out[3].size and p.mlp[-1].size for p in m.decode_plans)
    _assert_same(eng)
    _assert_same_batched(eng)


def test_layers_that_do_not_qualify_run_the_general_path_between_fused_ones(tmp_path: pathlib.Path) -> None:
    eng = _two_layer_q4_0(tmp_path)
    m = eng.runner.model
    m.layers[1].post_ffn_norm = np.ones(m.args.hidden_size, np.float32)  # OLMo 2 / Gemma style: not fused
    m.decode_plans = llama_decode.plan_layers(m)
    assert m.decode_plans[1] is None and m.decode_plans[0] is not None
    _assert_same(eng)
    _assert_same_batched(eng)
    m.layers[1].q_bias = np.zeros(m.layers[1].q.rows, np.float32)  # q's bias without k's and v's: never fused
    m.layers[1].post_ffn_norm = None
    assert llama_decode.plan_layers(m)[1] is None


def test_steps_that_do_not_qualify() -> None:
    eng = _engine("llama/model-Q4_0.gguf", "q8_0")  # pages attention_rows does not read
    m = eng.runner.model
    assert m.decode_plans is not None
    seen = []
    real = m.forward

    def forward(batch, kv, **kw):
        seen.append(llama_decode.step_ok(batch, kv))
        return real(batch, kv, **kw)

    m.forward = forward
    list(eng.generate_ids([1, 5, 6, 7], SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)))
    assert seen and not any(seen)


def test_reference_kernels_plan_nothing(monkeypatch) -> None:
    monkeypatch.setenv("MODELC_KERNELS", "ref")
    assert _engine("llama/model-Q4_0.gguf", "f32").runner.model.decode_plans is None
