"""linear.matmul (numba paths) against the numpy twins in ref_linear, for every stored type."""

from __future__ import annotations

import numpy as np
import pytest

from modelc.errors import ModelcError
from modelc.ir import DataType, TensorData
from modelc.kernels.matmul import linear, plan
from modelc.kernels.matmul.gemm_random import random_scale, random_tensor
from modelc.kernels.reference import ref_linear
from modelc.kernels.simd import qdot

QUANT = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "I8", "I4"]
FLOAT = ["F32", "F16", "BF16"]
# T >= PREFILL_MIN_T: the dequantize + BLAS path (but Q4_0 / Q8_0 / Q4_K stay on the int8 AMX
# tiles where the CPU has them: plan.plan_matmul); the others the int8 / half kernels.
TOKENS = [1, 3, 17, 100, max(plan.PREFILL_MIN_T, 1)]

# Tolerances, in one place. Relative to max |ref|.
EXACT_QACT = 2e-5  # int8-activation kernel vs a reference that quantizes activations the same way
VS_FP32_QACT = 3e-2  # int8-activation kernel vs plain fp32 (activation rounding, ~5e-3 typical)
FLOAT_TOL = 2e-5  # fp32 accumulation order


def _weight(name: str, n: int, c: int, seed: int) -> linear.Weight:
    rng = np.random.default_rng(seed)
    dt = DataType[name]
    t = random_tensor(dt, n, c, rng)
    s = random_scale(n, rng) if dt in (DataType.I8, DataType.I4) else None
    return linear.prepare_weight(t, s)


def _relerr(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def _run(w: linear.Weight, t: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(seed).standard_normal((t, w.cols)).astype(np.float32)
    out = np.full((t, w.rows), np.nan, np.float32)  # canary: every element must be written
    linear.matmul(out, x, w)
    assert not np.isnan(out).any()
    return out, x


@pytest.mark.parametrize("t", TOKENS)
@pytest.mark.parametrize("name", QUANT)
def test_quantized_matmul(name: str, t: int) -> None:
    c = 512 if name not in ("I8", "I4") else 96
    w = _weight(name, 37, c, seed=t)
    out, x = _run(w, t, seed=100 + t)
    fp32 = np.empty_like(out)
    ref_linear.matmul(fp32, x, w)
    if plan.plan_matmul(w, t) is not plan.Path.BLAS:  # int8 activations
        qact = np.empty_like(out)
        ref_linear.matmul_qact(qact, x, w)
        assert _relerr(out, qact) < EXACT_QACT
        assert _relerr(out, fp32) < VS_FP32_QACT
    else:
        assert _relerr(out, fp32) < FLOAT_TOL


@pytest.mark.parametrize("t", [1, 3, 17, plan.PREFILL_MIN_T_FLOAT])
@pytest.mark.parametrize("name", FLOAT)
def test_float_matmul(name: str, t: int) -> None:
    w = _weight(name, 29, 200, seed=t)  # C=200: not a multiple of 16, exercises the tails
    out, x = _run(w, t, seed=7)
    want = np.empty_like(out)
    ref_linear.matmul(want, x, w)
    assert _relerr(out, want) < FLOAT_TOL


@pytest.mark.parametrize("name", ["I8", "I4"])
def test_scaled_int_with_ragged_rows(name: str) -> None:
    w = _weight(name, 5, 70, seed=3)  # 70 % 32 != 0: dequantize + BLAS path
    out, x = _run(w, 2, seed=4)
    want = np.empty_like(out)
    ref_linear.matmul(want, x, w)
    assert _relerr(out, want) < FLOAT_TOL


@pytest.mark.parametrize("name", ["Q4_0", "Q8_0", "Q4_1", "Q5_0"])
@pytest.mark.parametrize("t", [1, 4, 6])
def test_odd_block_count(name: str, t: int) -> None:
    w = _weight(name, 19, 96, seed=5)  # 3 blocks per row: the unrolled loops' tails
    out, x = _run(w, t, seed=6)
    want = np.empty_like(out)
    ref_linear.matmul_qact(want, x, w)
    assert _relerr(out, want) < EXACT_QACT


def test_large_rows_and_single_row() -> None:
    for n, c in [(1, 256), (333, 2048)]:
        w = _weight("Q4_K", n, c, seed=n)
        out, x = _run(w, 2, seed=n)
        want = np.empty_like(out)
        ref_linear.matmul_qact(want, x, w)
        assert _relerr(out, want) < EXACT_QACT


def test_zero_activation_block_and_zero_tokens() -> None:
    w = _weight("Q5_1", 8, 128, seed=1)
    x = np.zeros((2, 128), np.float32)
    x[1, :32] = 1.0
    out = np.full((2, 8), np.nan, np.float32)
    linear.matmul(out, x, w)
    want = np.empty_like(out)
    ref_linear.matmul_qact(want, x, w)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    empty = np.empty((0, 8), np.float32)
    linear.matmul(empty, np.empty((0, 128), np.float32), w)


def test_reference_env_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    """MODELC_KERNELS=ref applies to weights prepared after it is set (their plan is fixed then)."""
    monkeypatch.setenv("MODELC_KERNELS", "ref")
    w = _weight("Q8_0", 16, 64, seed=2)
    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    got = np.empty((1, 16), np.float32)
    linear.matmul(got, x, w)
    want = np.empty_like(got)
    ref_linear.matmul(want, x, w)
    np.testing.assert_array_equal(got, want)


def test_bad_arguments_raise_modelc_errors() -> None:
    w = _weight("Q4_0", 4, 64, seed=0)
    with pytest.raises(ModelcError, match="x must be float32"):
        linear.matmul(np.empty((1, 4), np.float32), np.empty((1, 32), np.float32), w)
    with pytest.raises(ModelcError, match="out must be float32"):
        linear.matmul(np.empty((1, 5), np.float32), np.empty((1, 64), np.float32), w)
    with pytest.raises(ModelcError, match="C-contiguous"):
        linear.matmul(np.empty((2, 4), np.float32), np.empty((64, 2), np.float32).T, w)
    with pytest.raises(ModelcError, match="2-D"):
        linear.prepare_weight(TensorData.from_array(np.zeros((2, 2, 2), np.float32)))
    with pytest.raises(ModelcError, match="type I32"):
        linear.prepare_weight(TensorData.from_array(np.zeros((2, 2), np.int32)))
    with pytest.raises(ModelcError, match="scale"):
        linear.prepare_weight(TensorData.from_array(np.zeros((2, 32), np.int8)))
    with pytest.raises(ModelcError, match="out of range"):
        linear.dequantize_rows(random_tensor(DataType.Q4_0, 3, 32, np.random.default_rng(0)), np.array([3]))
    for bad in ([-1], [0, 5], [-2, 1]):
        with pytest.raises(ModelcError, match="out of range"):
            linear.dequantize_rows(random_tensor(DataType.Q4_K, 3, 256, np.random.default_rng(0)), np.array(bad))


def test_dequantize_flattens_leading_dims() -> None:
    t = random_tensor(DataType.Q6_K, 6, 256, np.random.default_rng(9))
    t3 = TensorData((2, 3, 256), t.dtype, t.data)
    np.testing.assert_array_equal(linear.dequantize(t3), ref_linear.dequantize(t))


def test_int8_dot_intrinsic_matches_numpy() -> None:
    from numba import njit

    @njit(cache=False)
    def lanes(w, a):
        acc = qdot.fma_i32x8(
            qdot.zeros_f32x8(),
            qdot.dot_i8x32(qdot.load_i8x32(w, 0), qdot.load_i8x32(a, 0)),
            qdot.splat_f32x8(np.float32(1)),
        )
        buf = np.empty(8, np.float32)
        qdot.store_f32x8(buf, 0, acc)
        return buf

    rng = np.random.default_rng(0)
    w = rng.integers(-128, 128, 32).astype(np.int8)
    w[0] = -128
    a = rng.integers(-127, 128, 32).astype(np.int8)
    want = (w.astype(np.int64) * a).reshape(8, 4).sum(axis=1)
    np.testing.assert_array_equal(lanes(w, a), want.astype(np.float32))


_PORTABLE_CHECK = """
import numpy as np
from modelc.ir import DataType
from modelc.kernels.matmul import linear, plan
from modelc.kernels.reference import ref_linear
from modelc.kernels.simd import qdot
from modelc.kernels.matmul.gemm_random import random_tensor
assert not qdot.HAS_AVX2
rng = np.random.default_rng(0)
worst = 0.0
for name in ["Q4_0", "Q8_0", "Q4_K", "Q6_K", "Q5_1", "F16"]:
    w = linear.prepare_weight(random_tensor(DataType[name], 21, 256, rng))
    for t in (1, 5):
        x = rng.standard_normal((t, 256)).astype(np.float32)
        out = np.full((t, 21), np.nan, np.float32)
        linear.matmul(out, x, w)
        want = np.empty_like(out)
        (ref_linear.matmul if name == "F16" else ref_linear.matmul_qact)(want, x, w)
        worst = max(worst, float(np.abs(out - want).max() / np.abs(want).max()))
print(worst)
"""


@pytest.mark.slow
def test_portable_fallback_without_avx2() -> None:
    """The generic LLVM vector IR path (non-x86 CPUs) gives the same numbers."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, MODELC_NO_AVX2="1")  # the kernel cache keys on the switches (jit_cache)
    p = subprocess.run([sys.executable, "-c", _PORTABLE_CHECK], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert float(p.stdout.strip().splitlines()[-1]) < EXACT_QACT


def test_prefill_in_several_panels(monkeypatch: pytest.MonkeyPatch) -> None:
    from modelc.kernels.matmul import gemm_blas

    monkeypatch.setattr(gemm_blas, "PANEL_BYTES", 10 * 256 * 4)  # 10 rows per panel
    w = _weight("Q5_K", 37, 256, seed=11)  # not an AMX kind: BLAS from PREFILL_MIN_T on everywhere
    out, x = _run(w, plan.PREFILL_MIN_T + 1, seed=12)
    want = np.empty_like(out)
    ref_linear.matmul(want, x, w)
    assert _relerr(out, want) < FLOAT_TOL
