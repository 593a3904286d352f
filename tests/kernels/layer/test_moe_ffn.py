"""kernels/layer/moe_ffn.py (a MoE layer's experts in one numba call) against its numpy twin ref_moe.moe_ffn."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from modelc.ir import DataType, TensorData
from modelc.kernels.layer import moe_ffn
from modelc.kernels.layer.moe_weights import MoeExperts, stack_experts
from modelc.kernels.matmul import gemm_r16
from modelc.kernels.matmul.gemm_random import random_tensor
from modelc.kernels.quant import quant
from modelc.kernels.reference import ref_moe

EXACT_QACT = 5e-4
"""Same int8 activations as the twin, float summation order only, but through two matmuls: an order
difference in gate/up can move one intermediate activation across an int8 rounding step (one code
of 127 in that block, seen: 1e-4 of the output's max); single matmuls hold 2e-5."""


def _experts(gate: str, down: str, E: int, F: int, C: int, seed: int, *, bias: bool = False) -> MoeExperts:
    rng = np.random.default_rng(seed)

    def stacked(name: str, rows: int, cols: int) -> TensorData:
        parts = [random_tensor(DataType[name], rows, cols, rng) for _ in range(E)]
        return TensorData((E, rows, cols), DataType[name], np.concatenate([p.data.reshape(-1) for p in parts]))

    biases = None
    if bias:
        biases = tuple(rng.standard_normal((E, n)).astype(np.float32) * 0.1 for n in (F, F, C))
    return stack_experts(stacked(gate, F, C), stacked(gate, F, C), stacked(down, C, F), biases=biases, oss=bias)


def _check(ex: MoeExperts, T: int, k: int, normalize: bool, seed: int, twin: MoeExperts | None = None) -> None:
    """moe_ffn on ex against the numpy twin on `twin` (default ex: the same experts) for T random tokens."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((T, ex.hidden)).astype(np.float32)
    logits = rng.standard_normal((T, ex.num_experts)).astype(np.float32)
    got = np.full((T, ex.hidden), np.nan, np.float32)
    moe_ffn.moe_ffn(got, x, logits, ex, k, normalize)
    want = np.empty_like(got)
    ref_moe.moe_ffn(want, x, logits, ex if twin is None else twin, k, normalize, qact=True)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < EXACT_QACT, (ex.gate_dtype, ex.down_dtype, T, k, err)


@pytest.mark.parametrize("gate, down", [("Q4_K", "Q6_K"), ("Q5_K", "Q4_K"), ("IQ4_XS", "IQ4_NL"), ("MXFP4", "Q4_K")])
def test_matches_twin(gate: str, down: str) -> None:
    """Decode (1 token) and small batches whose tokens share experts, softmax renormalized or not."""
    ex = _experts(gate, down, E=6, F=256, C=512, seed=1)
    assert moe_ffn.supported(ex)
    _check(ex, T=1, k=2, normalize=True, seed=2)
    _check(ex, T=5, k=3, normalize=False, seed=3)
    _check(ex, T=9, k=6, normalize=True, seed=4)  # every expert chosen by every token
    _check(ex, T=1, k=1, normalize=True, seed=5)  # fewer experts than threads: the row split, short tasks


def test_task_rows() -> None:
    """Row tasks: whole experts where there are enough of them, else shorter (multiples of 32) for balance."""
    assert moe_ffn._task_rows(512, 20, 2) == 512  # a T = 8 step of a 32-expert model: whole experts
    assert moe_ffn._task_rows(1024, 20, 2) == 1024
    assert moe_ffn._task_rows(512, 3, 2) == 192  # 3 experts: 8 tasks of 192 rows (the last shorter)
    assert moe_ffn._task_rows(256, 1, 2) == 32
    assert moe_ffn._task_rows(40, 1, 8) == 32  # never below 32 rows
    assert moe_ffn._task_rows(100, 64, 1) == 128  # n rounded up to 32: one task covers the expert


def _r16(ex: MoeExperts) -> MoeExperts:
    """ex with its R16_KINDS projections repacked (as models/moe.py's loader does) and their file-layout
    blocks zeroed: the kernel must read only the copies."""
    E, F, C = ex.num_experts, ex.ffn, ex.hidden
    new = {}
    for name, rows in (("gate", F), ("up", F), ("down", C)):
        dt, a = getattr(ex, name + "_dtype"), getattr(ex, name)
        if quant.KIND[dt] in moe_ffn.R16_KINDS:
            new[name + "_r16"] = gemm_r16.repack(a.reshape(E * rows, -1), dt).reshape(E, rows // 16, -1)
            new[name] = np.zeros_like(a)
    return dataclasses.replace(ex, **new)


@pytest.mark.parametrize("down", ["Q6_K", "Q4_K"])
def test_r16_experts_match_twin(down: str) -> None:
    """Experts repacked into gemm_r16's 16-row groups: decode (1 token) and 8 tokens sharing experts."""
    ex = _experts("Q4_K", down, E=6, F=256, C=512, seed=11)
    rx = _r16(ex)
    assert rx.gate_r16 is not None and rx.down_r16 is not None
    for T, k, normalize, seed in ((1, 2, True, 12), (8, 3, False, 13)):
        _check(rx, T, k, normalize, seed, twin=ex)


def test_router_in_the_kernel() -> None:
    """logits None: the kernel computes them from the F32 router weight (and bias)."""
    from modelc.kernels.matmul import linear

    ex = _experts("Q4_K", "Q6_K", E=5, F=256, C=256, seed=9)
    rng = np.random.default_rng(10)
    router = linear.prepare_weight(TensorData.from_array(rng.standard_normal((5, 256)).astype(np.float32)))
    ex = stack_experts(*_tensors(ex), router=router, router_bias=rng.standard_normal(5).astype(np.float32))
    assert ex.router is not None
    x = rng.standard_normal((4, 256)).astype(np.float32)
    got, want = np.empty((4, 256), np.float32), np.empty((4, 256), np.float32)
    moe_ffn.moe_ffn(got, x, None, ex, 2, True)
    ref_moe.moe_ffn(want, x, None, ex, 2, True, qact=True)
    assert float(np.abs(got - want).max() / np.abs(want).max()) < EXACT_QACT


def _tensors(ex: MoeExperts) -> tuple[TensorData, TensorData, TensorData]:
    E, F, C = ex.num_experts, ex.ffn, ex.hidden
    return (TensorData((E, F, C), ex.gate_dtype, ex.gate.reshape(-1)), TensorData((E, F, C), ex.up_dtype,
            ex.up.reshape(-1)), TensorData((E, C, F), ex.down_dtype, ex.down.reshape(-1)))  # fmt: skip


def test_biases_and_clamped_swiglu() -> None:
    """gpt-oss: expert biases and the clamped SwiGLU."""
    _check(_experts("MXFP4", "MXFP4", E=4, F=64, C=128, seed=5, bias=True), T=3, k=2, normalize=True, seed=6)


def test_route_matches_twin() -> None:
    rng = np.random.default_rng(7)
    logits = rng.standard_normal((6, 10)).astype(np.float32)
    for k, normalize in ((1, True), (3, False), (10, True)):
        sel, wts = np.empty((6, k), np.int64), np.empty((6, k), np.float32)
        moe_ffn._route(logits, k, normalize, sel, wts)
        want_sel, want_w = ref_moe.route(logits, k, normalize)
        order = np.argsort(want_sel, axis=1)
        got_order = np.argsort(sel, axis=1)
        np.testing.assert_array_equal(np.take_along_axis(sel, got_order, 1), np.take_along_axis(want_sel, order, 1))
        np.testing.assert_allclose(np.take_along_axis(wts, got_order, 1), np.take_along_axis(want_w, order, 1),
                                   rtol=1e-6)  # fmt: skip


def test_unsupported_kinds() -> None:
    assert not moe_ffn.supported(_experts("Q4_0", "Q4_0", E=2, F=32, C=64, seed=8))
    assert not moe_ffn.supported(_experts("Q4_K", "Q8_0", E=2, F=256, C=256, seed=8))


_FALLBACK_CHECK = """
import numpy as np
from modelc.kernels.layer import moe_ffn
from modelc.kernels.reference import ref_moe
from modelc.kernels.simd import qdot
from tests.kernels.layer.test_moe_ffn import _experts
worst = 0.0
for gate, down in (("Q4_K", "Q6_K"), ("IQ4_XS", "MXFP4")):
    ex = _experts(gate, down, E=4, F=256, C=256, seed=1)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 256)).astype(np.float32)
    logits = rng.standard_normal((3, 4)).astype(np.float32)
    got = np.empty((3, 256), np.float32)
    moe_ffn.moe_ffn(got, x, logits, ex, 2, True)
    want = np.empty_like(got)
    ref_moe.moe_ffn(want, x, logits, ex, 2, True, qact=True)
    worst = max(worst, float(np.abs(got - want).max() / np.abs(want).max()))
from tests.kernels.layer.test_moe_ffn import _r16
ex = _experts("Q4_K", "Q4_K", E=4, F=256, C=256, seed=2)
for T in (1, 8):
    x = np.random.default_rng(T).standard_normal((T, 256)).astype(np.float32)
    logits = np.random.default_rng(T + 1).standard_normal((T, 4)).astype(np.float32)
    got, want = np.empty((T, 256), np.float32), np.empty((T, 256), np.float32)
    moe_ffn.moe_ffn(got, x, logits, _r16(ex), 2, True)
    ref_moe.moe_ffn(want, x, logits, ex, 2, True, qact=True)
    worst = max(worst, float(np.abs(got - want).max() / np.abs(want).max()))
print(qdot.HAS_AVX2, qdot.HAS_VNNI, worst)
"""


@pytest.mark.slow
def test_fallback_without_avx512_and_vnni() -> None:
    """The 256-bit AVX2 paths (what an AVX2-only CPU runs) give the same numbers, the r16 experts too."""
    from tests.kernels.fallback import fallback_worst

    env = {"MODELC_NO_AVX512": "1", "MODELC_NO_VNNI": "1"}
    assert fallback_worst(_FALLBACK_CHECK, env, timeout=900) < EXACT_QACT
