"""A decode step through the decode layers (kernels/layer/decode_step.py's calls, models/llama_decode.py's runs of
layers), one stream or several in lockstep, gives the same logits, bit for bit, as the forward's general per-kernel
path: the same kernels on the same arrays in the same order. So do runs of one layer each (a run starting past the
first layer), and runs with general layers between them."""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np
import pytest

from modelc.api.engine import Engine
from modelc.kernels.layer import decode_layer, decode_step, moe_ffn
from modelc.kernels.matmul import plan
from modelc.kernels.runtime import warm_list
from modelc.models import llama, llama_decode
from modelc.models.fused import MAX_T
from modelc.request import SamplingParams

QUANT = pathlib.Path(__file__).parents[1] / "fixtures/models/quant"


@pytest.fixture(autouse=True)
def _numba_from_the_first_step(monkeypatch) -> None:
    """Engines load with numba compiled (or loaded) first: with a cold cache a file model's engine would serve
    its first steps on the reference kernels while numba compiles (engine/warm.py), so two runs compared
    bit for bit could take different kernels (seen as ~1e-7 differences in cold-cache runs only)."""
    monkeypatch.setenv("MODELC_COLD_START", "wait")


def _engine(name: str, kv_dtype: str) -> Engine:
    return Engine.load(QUANT / name, threads=2, kv_cache_tokens=256, kv_dtype=kv_dtype)


def _mode(m, mode: str) -> llama_decode.DecodeRuns | None:
    """The model's decode runs for `mode`: "step" (as loaded: every layer in one call where all qualify alike),
    "layers" (a run a layer: one call each) or "general" (none)."""
    if mode == "general" or m.decode is None:
        return None
    return m.decode if mode == "step" else llama_decode.DecodeRuns(m.decode.plans, longest=1)


def _decode_logits(eng: Engine, mode: str, n: int = 12) -> tuple[list[int], list[np.ndarray]]:
    """Greedy tokens and every one-token step's logits, the model's decode runs as `mode` (_mode) makes them."""
    m = eng.runner.model
    decode = m.decode
    got: list[np.ndarray] = []
    real = m.forward

    def forward(batch, kv, **kw):
        out = real(batch, kv, **kw)
        if batch.num_tokens == 1:
            assert llama_decode.step_ok(batch, kv)  # these steps take the decode layers where the mode has runs
            got.append(out.copy())
        return out

    m.forward, m.decode = forward, _mode(m, mode)
    try:
        ids = [1, *np.random.default_rng(0).integers(3, eng.runner.vocab_size, 20).tolist()]
        toks = list(eng.generate_ids(ids, SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)))
    finally:
        m.forward, m.decode = real, decode
    return toks, got


def _assert_same(eng: Engine) -> None:
    slow_toks, slow = _decode_logits(eng, "general")
    for mode in ("step", "layers"):
        fast_toks, fast = _decode_logits(eng, mode)
        assert fast_toks == slow_toks and len(fast) == len(slow) > 0
        for a, b in zip(fast, slow, strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    ("name", "kv_dtype"),
    [("llama/model-Q4_K_M.gguf", "f16"), ("llama/model-Q4_0.gguf", "f32"), ("llama/model-Q8_0.gguf", "f16"),
     ("llama/model-Q4_1.gguf", "f16"), ("llama/model-Q4_K_M.gguf", "q8_0"),
     ("llama/model-Q5_K_M.gguf", "f16"), ("llama/model-IQ4_XS.gguf", "f16"),
     ("qwen3moe/model-Q4_K_M.gguf", "f16"), ("qwen3moe/model-Q4_0.gguf", "f32")],
)  # fmt: skip
def test_fused_layers_match_the_general_path_bit_for_bit(name: str, kv_dtype: str) -> None:
    eng = _engine(name, kv_dtype)
    decode = eng.runner.model.decode
    if decode is None:
        assert "Q8_0" in name or "IQ4" in name  # on gemm_r16 only with an exact wide dot (VNNI)
        pytest.skip("these weights are not on the gemm_r16 path on this CPU")
    plans = decode.plans
    assert all(p is not None for p in plans)  # every layer of these plain models qualifies
    # every layer in one call, dense or with moe_ffn's experts; Q4_0 experts: MoeFFN.forward after each layer's
    # attention half, so a run a layer
    runs = decode.runs(1)
    kind = llama_decode.DENSE if name.startswith("llama") else llama_decode.MOE
    spans = [(r.start, r.end, r.kind) for r in runs]
    if name == "qwen3moe/model-Q4_0.gguf":
        assert spans == [(i, i + 1, llama_decode.ATTENTION) for i in range(len(plans))]
    else:
        assert spans == [(0, len(plans), kind)]
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
    # the decode layers' compiled picks (decode_layer._chain) leave the warm list whole: a restart replays it
    assert warm_list.snapshot() is not None


class _Proxy:
    """A module's attributes, some replaced (for the one module that looks them up through this object)."""

    def __init__(self, module, **replaced) -> None:
        self._module = module
        self.__dict__.update(replaced)

    def __getattr__(self, name: str):
        return getattr(self._module, name)


def _batched_logits(eng: Engine, mode: str, streams: int = 5, steps: int = 6) -> tuple[list[np.ndarray], int]:
    """The logits of every forward in which all `streams` sequences (prompts of different lengths) decode one
    token each (mode as _decode_logits); and how many attention halves ran at more than one token."""
    from modelc.cache.block_pool import BlockPool
    from modelc.engine.core import EngineCore
    from modelc.scheduler.scheduler import Scheduler
    from modelc.scheduler.sequence import Sequence

    m = eng.runner.model
    decode, real = m.decode, m.forward
    got: list[np.ndarray] = []
    wide = [0]

    def forward(batch, kv, **kw):
        out = real(batch, kv, **kw)
        if batch.num_tokens == batch.num_seqs == streams:
            got.append(out.copy())
        return out

    def counted(kernel):
        def layers(table, layer0, x, *args):
            wide[0] += table.shape[0] * (x.shape[0] > 1)
            return kernel(table, layer0, x, *args)

        return layers

    # llama.py's name for the kernel module, with the entries it calls counted; the module itself stays as it
    # is, since numba resolves its attributes when it compiles a caller (patched there, a cold compile inside
    # this window failed)
    step_mod = _Proxy(decode_step, **{f: counted(getattr(decode_step, f))
                                      for f in ("decode_layers", "decode_layers_moe", "attention_layers")})  # fmt: skip

    config = dataclasses.replace(eng.core.scheduler.config, max_num_seqs=streams, max_queue=streams)
    core = EngineCore(Scheduler(config, BlockPool(eng.runner.num_kv_blocks, enable_prefix_caching=False)), eng.runner)
    rng = np.random.default_rng(2)
    params = SamplingParams(max_tokens=steps, temperature=0.0, ignore_eos=True)
    m.forward, llama.decode_step, m.decode = forward, step_mod, _mode(m, mode)
    try:
        for i in range(streams):
            core.add(Sequence(i, [1, *rng.integers(3, eng.runner.vocab_size, 6 + 5 * i).tolist()], params))
        while core.has_work:
            core.step()
    finally:
        m.forward, m.decode, llama.decode_step = real, decode, decode_step
    return got, wide[0]


@pytest.mark.parametrize(
    ("name", "kv_dtype"),
    [("llama/model-Q4_K_M.gguf", "f16"), ("llama/model-Q4_0.gguf", "f32"), ("qwen3moe/model-Q4_K_M.gguf", "f16"),
     ("llama/model-Q4_0.gguf", "q8_0")],
)  # fmt: skip
def test_streams_in_lockstep_take_the_fused_layers_bit_for_bit(name: str, kv_dtype: str) -> None:
    eng = _engine(name, kv_dtype)
    plans = eng.runner.model.decode.plans
    assert all(p is not None for p in plans)
    for p, L in zip(plans, eng.runner.model.layers, strict=True):
        top = MAX_T
        if name.startswith("qwen3moe"):  # as far as the experts' one call goes (moe_ffn.R16_MAX_T on gemm_r16)
            top = MAX_T if L.moe.one_call(MAX_T) else moe_ffn.FUSED_MAX_T
        assert p.max_t == _one_token_paths_up_to(L, top) >= 2
    streams = min(5, *(p.max_t for p in plans))  # at most the layers' bound (plan.R16_AMX_MIN_T on AMX CPUs)
    slow, none = _batched_logits(eng, "general", streams=streams)
    assert none == 0
    for mode in ("step", "layers"):
        fast, wide = _batched_logits(eng, mode, streams=streams)
        assert len(fast) == len(slow) >= 4 and wide >= len(fast) * len(plans)
        for a, b in zip(fast, slow, strict=True):
            np.testing.assert_array_equal(a, b)


def _one_token_paths_up_to(L, top: int) -> int:
    """The most tokens, at most top, up to which every dense matmul of layer L runs its one-token kernel."""
    ws = [w for w in (getattr(L, n, None) for n in ("q", "k", "v", "o", "gate", "up", "down")) if w is not None]
    for t in range(2, top + 1):
        if any(plan.path(w, t) is not plan.path(w, 1) for w in ws):
            return t - 1
    return top


def _assert_same_batched(eng: Engine, streams: int = 4) -> None:
    streams = min(streams, *(p.max_t for p in eng.runner.model.decode.plans if p is not None))
    assert streams >= 2
    slow, _ = _batched_logits(eng, "general", streams=streams, steps=4)
    for mode in ("step", "layers"):
        fast, wide = _batched_logits(eng, mode, streams=streams, steps=4)
        assert len(fast) == len(slow) >= 2 and wide > 0
        for a, b in zip(fast, slow, strict=True):
            np.testing.assert_array_equal(a, b)


def test_sliding_windows_shorter_than_the_context_match_at_one_and_more_tokens() -> None:
    eng = _engine("llama/model-Q4_0.gguf", "f16")
    m = eng.runner.model
    m.args = dataclasses.replace(m.args, layer_windows=tuple(5 + 2 * i for i in range(m.args.num_layers)))
    m.decode = llama_decode.plan_decode(m)  # prompts of 6-26 tokens: every window slides
    assert all(p is not None and p.window == 5 + 2 * i for i, p in enumerate(m.decode.plans))
    _assert_same(eng)
    _assert_same_batched(eng)


def test_one_token_paths_stop_the_fused_layers_at_one_token() -> None:
    eng = _engine("llama/model-Q5_K_M.gguf", "f16")  # Q5_K: gemm_fused_k's one-token kernel; more tokens: rows
    plans = eng.runner.model.decode.plans
    one = [p for p in plans if p is not None and decode_layer.MATVEC_K in (p.qkv[2], p.qkv[6], p.qkv[10], p.out[2])]
    assert one and all(p.max_t == 1 for p in one)
    eng = _engine("qwen3moe/model-Q4_0.gguf", "f16")  # Q4_0 experts: MoeFFN.forward's loop, grouped at T > 1
    assert all(p.max_t == 1 for p in eng.runner.model.decode.plans)
    assert eng.runner.model.decode.runs(2) == ()
    fast, wide = _batched_logits(eng, "step", streams=3, steps=3)
    assert fast and wide == 0


def test_a_projection_on_neither_path_keeps_the_layer_general() -> None:
    eng = _engine("llama/model-Q5_0.gguf", "f16")  # Q5_0: gemm_int's rows kernel at T = 1
    assert eng.runner.model.decode is None


def _two_layer_q4_0(tmp_path: pathlib.Path) -> Engine:
    from modelc.ir import DataType
    from modelc.pack import pack
    from tests.formats.test_gguf_iquant import LAYERS, _tensors, _write

    assert LAYERS >= 2
    _write(tmp_path / "q.gguf", _tensors(DataType.Q4_0))
    eng = Engine.load(pack(tmp_path / "q.gguf", out=tmp_path / "q.modelc"), threads=2, kv_cache_tokens=256)
    assert eng.runner.model.decode is not None and all(p is not None for p in eng.runner.model.decode.plans)
    return eng


def test_projection_biases_are_added_as_the_general_path_adds_them(tmp_path: pathlib.Path) -> None:
    eng = _two_layer_q4_0(tmp_path)
    m = eng.runner.model
    rng = np.random.default_rng(1)
    for L in m.layers:  # Qwen2's q/k/v biases, and llama's attention_bias / mlp_bias ones
        for name in ("q", "k", "v", "o", "gate", "up", "down"):
            setattr(L, name + "_bias", (0.05 * rng.standard_normal(getattr(L, name).rows)).astype(np.float32))
    m.decode = llama_decode.plan_decode(m)
    assert all(p is not None and p.qkv[-1].size and p.out[3].size and p.mlp[-1].size for p in m.decode.plans)
    _assert_same(eng)
    _assert_same_batched(eng)


def test_layers_that_do_not_qualify_run_the_general_path_between_fused_ones(tmp_path: pathlib.Path) -> None:
    eng = _two_layer_q4_0(tmp_path)
    m = eng.runner.model
    m.layers[1].post_ffn_norm = np.ones(m.args.hidden_size, np.float32)  # OLMo 2 / Gemma style: not fused
    m.decode = llama_decode.plan_decode(m)
    assert m.decode.plans[1] is None and m.decode.plans[0] is not None
    assert [(r.start, r.end) for r in m.decode.runs(1)] == [(0, 1)]  # then layer 1 on the general path
    _assert_same(eng)
    _assert_same_batched(eng)
    m.layers[1].q_bias = np.zeros(m.layers[1].q.rows, np.float32)  # q's bias without k's and v's: never fused
    m.layers[1].post_ffn_norm = None
    assert llama_decode.plan_layers(m)[1] is None


@pytest.mark.parametrize(
    ("moe_layer", "stacked", "spans"),
    [(1, True, [(0, 1, llama_decode.DENSE), (1, 2, llama_decode.MOE)]),
     (0, True, [(0, 1, llama_decode.MOE), (1, 2, llama_decode.DENSE)]),
     (1, False, [(0, 1, llama_decode.DENSE), (1, 2, llama_decode.ATTENTION)])],
)  # fmt: skip
def test_mixed_dense_and_moe_layers_run_one_call_per_kind_bit_for_bit(
    tmp_path: pathlib.Path, moe_layer: int, stacked: bool, spans: list
) -> None:
    """A model whose layers are partly dense, partly mixtures of experts (the dense 2-layer model with the Qwen3-MoE
    fixture's experts in one layer, same width): a run of each kind, each its own entry (decode_layers, then
    decode_layers_moe, or attention_layers with MoeFFN.forward after it where the experts have no one-call
    kernel), with the same logits as the general path, one stream and in lockstep."""
    eng = _two_layer_q4_0(tmp_path)
    m = eng.runner.model
    donor = _engine("qwen3moe/model-Q4_K_M.gguf", "f16").runner.model.layers[0].moe
    assert donor.stacked is not None and donor.stacked.router is not None
    if not stacked:
        donor = dataclasses.replace(donor, stacked=None)  # the experts one by one: MoeFFN.forward's loop
    L = m.layers[moe_layer]
    L.gate = L.up = L.down = None
    L.gate_up = ()
    L.moe = donor
    m.decode = llama_decode.plan_decode(m)
    assert [(r.start, r.end, r.kind) for r in m.decode.runs(1)] == spans
    _assert_same(eng)
    if stacked:
        _assert_same_batched(eng)
    else:  # MoeFFN.forward groups its experts past one token: that layer then runs the general path
        assert [(r.start, r.end, r.kind) for r in m.decode.runs(2)] == spans[:1]


def test_steps_that_do_not_qualify() -> None:
    eng = _engine("llama/model-Q4_0.gguf", "mixed")  # q8_0 pages with hot f32 copies: the decode layers' kernels
    # read plain q8_0 pages only
    m = eng.runner.model
    assert m.decode is not None
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
    assert _engine("llama/model-Q4_0.gguf", "f32").runner.model.decode is None


def test_the_step_table_holds_each_layers_arrays_and_refuses_wrong_ones() -> None:
    m = _engine("llama/model-Q4_0.gguf", "f16").runner.model
    (run,) = m.decode.runs(1)
    width = decode_step.width(decode_step.ATTENTION + decode_step.MLP)
    assert run.kind == llama_decode.DENSE and run.table.shape == (m.args.num_layers, width)
    for p, row in zip(m.decode.plans, run.table, strict=True):
        norm, w0 = p.norms[0], p.qkv[0]
        assert row[:8].tolist() == [norm.ctypes.data, 1, 1, norm.shape[0], w0.ctypes.data, 1, *w0.shape]
    top = m.decode.max_t  # every layer's bound alike here: one run up to it, none past it
    assert top == min(p.max_t for p in m.decode.plans) > 1
    assert [(r.start, r.end) for r in m.decode.runs(top)] == [(0, m.args.num_layers)] and m.decode.runs(top + 1) == ()
    p = m.decode.plans[0]
    layout = decode_step.ATTENTION + decode_step.MLP
    parts = llama_decode.step_parts(p)
    assert decode_step.encode(layout, parts) == run.table[0].tolist()
    bad = ((p.norms[0].astype(np.float64),), *parts[1:])
    with pytest.raises(ValueError, match="f32 field"):
        decode_step.encode(layout, bad)
    strided = ((np.ones(2 * m.args.hidden_size, np.float32)[::2],), *parts[1:])
    with pytest.raises(ValueError, match="f32 field"):
        decode_step.encode(layout, strided)


def test_moe_batches_past_fused_max_t_stay_on_the_decode_layers_bit_for_bit() -> None:
    eng = Engine.load(QUANT / "qwen3moe/model-Q4_K_M.gguf", threads=2, kv_cache_tokens=2048, kv_dtype="f16")
    m = eng.runner.model
    if not m.layers[0].moe.one_call(MAX_T):
        pytest.skip("expert batches past FUSED_MAX_T leave gemm_r16 on this CPU (AMX tiles)")
    assert all(p.max_t == MAX_T for p in m.decode.plans)
    streams = moe_ffn.FUSED_MAX_T + 2
    slow, _ = _batched_logits(eng, "general", streams=streams, steps=3)
    fast, wide = _batched_logits(eng, "step", streams=streams, steps=3)
    assert len(fast) == len(slow) >= 1 and wide >= len(fast) * len(m.decode.plans)
    for a, b in zip(fast, slow, strict=True):
        np.testing.assert_array_equal(a, b)
