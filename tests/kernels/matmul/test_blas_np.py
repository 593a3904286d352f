"""blas_np.matmul and Dequantized.matmul (the compile-free matmuls of a cold start) equal the fp32 reference
for every stored type."""

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
@pytest.mark.parametrize("how", ["per_call", "copied", "over_budget"])
def test_matches_the_reference(name, t, how, monkeypatch):
    monkeypatch.setattr(blas_np, "PANEL_BYTES", 4 * 256 * 7)  # several panels, the last one short
    rng = np.random.default_rng(t)
    dt = DataType[name]
    n, c = 50, 256
    w = linear.prepare_weight(random_tensor(dt, n, c, rng), random_scale(n, rng) if name in ("I8", "I4") else None)
    x = rng.standard_normal((t, c)).astype(np.float32)
    got = np.full((t, n), np.nan, np.float32)  # canary: every element written
    want = np.empty((t, n), np.float32)
    mm = blas_np.matmul if how == "per_call" else blas_np.Dequantized(n * c * 4 - (how == "over_budget")).matmul
    mm(got, x, w)
    ref_linear.matmul(want, x, w)
    assert np.abs(got - want).max() <= FLOAT_TOL * np.abs(want).max()
    again = np.full((t, n), np.nan, np.float32)
    mm(again, x, w)  # a copy made by the first call, or dequantized again
    assert np.array_equal(again, got)


def test_dequantized_copies_each_weight_once_within_its_budget(monkeypatch):
    rng = np.random.default_rng(0)
    ws = [linear.prepare_weight(random_tensor(DataType.Q4_1, 32, 64, rng)) for _ in range(3)]
    dq = blas_np.Dequantized(2 * 32 * 64 * 4)  # room for two of the three
    made = []
    real = blas_np._panel
    monkeypatch.setattr(blas_np, "_panel", lambda w, *a: made.append(id(w)) or real(w, *a))
    x, out = rng.standard_normal((1, 64)).astype(np.float32), np.empty((1, 32), np.float32)
    for _ in range(3):
        for w in ws:
            dq.matmul(out, x, w)
    assert dq.used_bytes == 2 * 32 * 64 * 4
    assert made.count(id(ws[0])) == made.count(id(ws[1])) == 1  # copied once, at the first call
    assert made.count(id(ws[2])) == 3  # past the budget: dequantized at every call


def test_a_weight_kept_out_is_never_copied(monkeypatch):
    """The vocabulary matrices (engine/warm._keep_vocabulary_out) dequantize per call even where the budget has room."""
    rng = np.random.default_rng(1)
    head, other = (linear.prepare_weight(random_tensor(DataType.Q8_0, 32, 64, rng)) for _ in range(2))
    dq = blas_np.Dequantized(1 << 20)
    dq.keep_out(head)
    x, out = rng.standard_normal((2, 64)).astype(np.float32), np.empty((2, 32), np.float32)
    for w in (head, other):
        dq.matmul(out, x, w)
        want = np.empty_like(out)
        blas_np.matmul(want, x, w)
        assert np.array_equal(out, want)
    assert dq.used_bytes == 32 * 64 * 4  # `other` only
