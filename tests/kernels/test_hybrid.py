"""kernels/hybrid.py's numpy matmul rounds its activations as the numba model that takes over does: int8 blocks
where that model's kernel quantizes them (every repacked weight at any T; the int8 paths of the others), fp32 where
it does not. The numba side of this equality is tests/kernels/matmul/test_gemm_r16.py (the r16 kernels against
ref_linear.matmul_qact) and test_linear.py."""

from __future__ import annotations

import numpy as np
import pytest

from modelc.ir import DataType
from modelc.kernels import hybrid
from modelc.kernels.matmul import blas_np, gemm_r16, linear, plan
from modelc.kernels.matmul.gemm_random import random_tensor
from modelc.kernels.quant import quant
from modelc.kernels.reference import ref_linear

TOL = 2e-5  # fp32 summation order (tests/kernels/matmul/test_blas_np.py)


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    return bool(np.abs(got - want).max() <= TOL * np.abs(want).max())


def _case(name: str, t: int):
    rng = np.random.default_rng(t)
    n, c = 64, 256
    w = linear.prepare_weight(random_tensor(DataType[name], n, c, rng))
    x = rng.standard_normal((t, c)).astype(np.float32)
    return w, x


def _run(matmul, w, x) -> np.ndarray:
    out = np.full((x.shape[0], w.rows), np.nan, np.float32)
    matmul(out, x, w)
    return out


@pytest.mark.parametrize("name", ["Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q6_K"])
@pytest.mark.parametrize("t", [1, 6, 200])
def test_a_weight_the_numba_model_repacks_gets_int8_activations_at_any_t(name, t, monkeypatch):
    monkeypatch.delenv("MODELC_REPACK", raising=False)
    w, x = _case(name, t)
    assert gemm_r16.can_repack(w.dtype, w.rows, w.cols) and hybrid.quantizes_activations(w, t)
    twin = np.empty((t, w.rows), np.float32)
    ref_linear.matmul_qact(twin, x, w)  # what gemm_r16's kernels compute (test_gemm_r16.py), to float order
    for mm in (blas_np.matmul, blas_np.Dequantized(1 << 30).matmul):
        assert _close(_run(hybrid.activations_as_numba(mm), w, x), twin)
        assert not _close(_run(mm, w, x), twin)  # the fp32 activations alone are ~5e-3 away: this test can fail
    monkeypatch.setenv("MODELC_REPACK", "0")  # not repacked: the file layout's plan decides
    assert hybrid.quantizes_activations(w, t) == (plan.plan_matmul(w, t).value not in ("blas", "ref"))


@pytest.mark.parametrize("t", [1, 6, 200])
def test_other_weights_follow_their_plan(t):
    w, x = _case("Q5_0", t)  # quantized, never repacked
    assert not gemm_r16.can_repack(w.dtype, w.rows, w.cols) and w.dtype in quant.KIND
    want = np.empty((t, w.rows), np.float32)
    int8 = plan.plan_matmul(w, t) is not plan.Path.BLAS
    (ref_linear.matmul_qact if int8 else ref_linear.matmul)(want, x, w)
    assert hybrid.quantizes_activations(w, t) == int8
    assert _close(_run(hybrid.activations_as_numba(blas_np.matmul), w, x), want)
    w, x = _case("F16", t)  # float weights: fp32 activations on every path
    want = np.empty((t, w.rows), np.float32)
    ref_linear.matmul(want, x, w)
    assert not hybrid.quantizes_activations(w, t)
    assert _close(_run(hybrid.activations_as_numba(blas_np.matmul), w, x), want)


def test_the_hybrid_sets_matmul_rounds_like_numba():
    ks, _ = hybrid.hybrid_kernel_set(1 << 30)
    w, x = _case("Q4_1", 1)
    twin = np.empty((1, w.rows), np.float32)
    ref_linear.matmul_qact(twin, x, w)
    got = np.full((1, w.rows), np.nan, np.float32)
    ks.matmul.ref(got, x, w)  # the slot's numpy side (numba's side runs the int8 kernels themselves)
    assert _close(got, twin)
