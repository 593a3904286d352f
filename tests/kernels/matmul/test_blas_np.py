"""blas_np.matmul (the compile-free matmul of a cold start) equals the fp32 reference for every stored type."""

from __future__ import annotations

import numpy as np
import pytest

from modelc.ir import DataType
from modelc.kernels.matmul import blas_np, linear
from modelc.kernels.matmul.gemm_random import random_scale, random_tensor
from modelc.kernels.reference import ref_linear

TYPES = ["F32", "F16", "BF16", "Q4_0", "Q8_0", "Q4_1", "Q4_K", "Q6_K", "I8", "I4"]
FLOAT_TOL = 2e-5  # fp32 accumulation order (tests/kernels/matmul/test_linear.py)


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("t", [1, 6, 40])
def test_matches_the_reference(name, t, monkeypatch):
    monkeypatch.setattr(blas_np, "PANEL_BYTES", 4 * 256 * 7)  # several panels, the last one short
    rng = np.random.default_rng(t)
    dt = DataType[name]
    n, c = 50, 256
    w = linear.prepare_weight(random_tensor(dt, n, c, rng), random_scale(n, rng) if name in ("I8", "I4") else None)
    x = rng.standard_normal((t, c)).astype(np.float32)
    got = np.full((t, n), np.nan, np.float32)  # canary: every element written
    want = np.empty((t, n), np.float32)
    blas_np.matmul(got, x, w)
    ref_linear.matmul(want, x, w)
    assert np.abs(got - want).max() <= FLOAT_TOL * np.abs(want).max()
