"""gemm_float.hmatmul for F16 / BF16 weights at T=1 (and the T>1 path beside it) against fp32 numpy."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from modelc.ir import DataType, TensorData
from modelc.kernels.matmul import gemm_float, linear
from modelc.kernels.matmul.gemm_random import random_tensor
from modelc.kernels.reference import ref_linear

FLOAT_TOL = 2e-5  # fp32 accumulation order


def _case(name: str, n: int, c: int, t: int, seed: int) -> tuple[linear.Weight, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = linear.prepare_weight(random_tensor(DataType[name], n, c, rng))
    x = rng.standard_normal((t, c)).astype(np.float32)  # (T, C)
    return w, x


def _hmatmul(w: linear.Weight, x: np.ndarray) -> np.ndarray:
    out = np.full((x.shape[0], w.rows), np.nan, np.float32)  # (T, N) canary: every element written
    gemm_float.hmatmul(out, x, w.blocks, w.dtype is DataType.BF16)
    return out


def _relerr(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def _want(w: linear.Weight, x: np.ndarray) -> np.ndarray:
    want = np.empty((x.shape[0], w.rows), np.float32)  # (T, N)
    ref_linear.matmul(want, x, w)
    return want


@pytest.mark.parametrize("name", ["F16", "BF16"])
@pytest.mark.parametrize("c", [1, 15, 16, 48, 64, 80, 200, 2048, 2048 + 63])
def test_t1_matches_fp32(name: str, c: int) -> None:
    """Every tail: the 64-wide steps, the 16-wide steps and the scalar rest."""
    w, x = _case(name, 21, c, 1, seed=c)
    assert _relerr(_hmatmul(w, x), _want(w, x)) < FLOAT_TOL


@pytest.mark.parametrize("name", ["F16", "BF16"])
@pytest.mark.parametrize("t", [2, 5, 31])
def test_small_t_still_matches(name: str, t: int) -> None:
    w, x = _case(name, 13, 200, t, seed=t)
    assert _relerr(_hmatmul(w, x), _want(w, x)) < FLOAT_TOL


def test_t1_reads_unaligned_rows() -> None:
    """An odd byte offset: the half loads take any alignment."""
    w, x = _case("F16", 9, 272, 1, seed=4)
    raw = np.zeros(w.blocks.size + 1, np.uint8)
    raw[1:] = w.blocks.reshape(-1)
    w2 = linear.prepare_weight(TensorData((9, 272), DataType.F16, raw[1:]))
    assert _relerr(_hmatmul(w2, x), _want(w, x)) < FLOAT_TOL


def test_t1_special_values() -> None:
    """Largest fp16 magnitudes and subnormals convert exactly (vcvtph2ps), as numpy does."""
    n, c = 4, 128
    h = np.full((n, c), 1.0, np.float16)
    h[0, ::3] = np.float16(65504.0)
    h[1, ::5] = np.float16(6e-8)  # subnormal
    h[2] = -h[0]
    w = linear.prepare_weight(TensorData((n, c), DataType.F16, h.reshape(-1).view(np.uint8)))
    x = np.random.default_rng(0).standard_normal((1, c)).astype(np.float32)  # (1, C)
    want = x.astype(np.float64) @ h.astype(np.float64).T
    np.testing.assert_allclose(_hmatmul(w, x), want, rtol=1e-5, atol=1e-3)


_NO_AVX512_CHECK = """
import numpy as np
from modelc.ir import DataType
from modelc.kernels.matmul import gemm_float, linear
from modelc.kernels.reference import ref_linear
from modelc.kernels.simd import qdot
from modelc.kernels.matmul.gemm_random import random_tensor
assert not qdot.HAS_AVX512
rng = np.random.default_rng(0)
worst = 0.0
for name in ("F16", "BF16"):
    for c in (200, 2048):
        w = linear.prepare_weight(random_tensor(DataType[name], 11, c, rng))
        x = rng.standard_normal((1, c)).astype(np.float32)
        out = np.full((1, 11), np.nan, np.float32)
        gemm_float.hmatmul(out, x, w.blocks, name == "BF16")
        want = np.empty_like(out)
        ref_linear.matmul(want, x, w)
        worst = max(worst, float(np.abs(out - want).max() / np.abs(want).max()))
print(worst)
"""


@pytest.mark.slow
def test_t1_without_avx512() -> None:
    """The 8-lane row dot (CPUs without AVX-512) gives the same numbers."""
    env = dict(os.environ, MODELC_NO_AVX512="1")  # the kernel cache keys on the switches (jit_cache)
    p = subprocess.run([sys.executable, "-c", _NO_AVX512_CHECK], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert float(p.stdout.strip().splitlines()[-1]) < FLOAT_TOL
