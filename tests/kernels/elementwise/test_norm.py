from __future__ import annotations

import numpy as np
import pytest

from modelc.kernels.elementwise import norm
from modelc.kernels.reference import ref


@pytest.mark.parametrize("T,C", [(1, 1), (1, 64), (3, 17), (16, 256), (0, 8)])
def test_rms_norm_matches_ref(T, C, tol):
    rng = np.random.default_rng(T * 100 + C)
    x = rng.standard_normal((T, C)).astype(np.float32)
    w = rng.standard_normal(C).astype(np.float32)
    out = np.full((T, C), np.nan, np.float32)
    want = np.full((T, C), np.nan, np.float32)
    norm.rms_norm(out, x, w, 1e-5)
    ref.rms_norm(want, x, w, 1e-5)
    np.testing.assert_allclose(out, want, **tol["float32"])
    assert not np.isnan(out).any()
    # direct formula
    np.testing.assert_allclose(want, x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-5) * w, rtol=1e-5, atol=1e-6)


def test_rms_norm_in_place(tol):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 33)).astype(np.float32)
    w = rng.standard_normal(33).astype(np.float32)
    want = np.empty_like(x)
    ref.rms_norm(want, x, w, 1e-6)
    norm.rms_norm(x, x, w, 1e-6)
    np.testing.assert_allclose(x, want, **tol["float32"])


@pytest.mark.parametrize("T,C", [(1, 8), (7, 64), (0, 4)])
def test_add_rms_norm_matches_ref(T, C, tol):
    rng = np.random.default_rng(T + C)
    x = rng.standard_normal((T, C)).astype(np.float32)
    res = rng.standard_normal((T, C)).astype(np.float32)
    w = rng.standard_normal(C).astype(np.float32)
    res2 = res.copy()
    out = np.full((T, C), np.nan, np.float32)
    want = np.full((T, C), np.nan, np.float32)
    norm.add_rms_norm(out, res, x, w, 1e-5)
    ref.add_rms_norm(want, res2, x, w, 1e-5)
    np.testing.assert_allclose(res, res2, **tol["float32"])
    np.testing.assert_allclose(out, want, **tol["float32"])
    assert not np.isnan(out).any()


@pytest.mark.parametrize("T,C", [(1, 1), (2, 64), (9, 100), (0, 3)])
def test_layer_norm_matches_ref(T, C, tol):
    rng = np.random.default_rng(T * 7 + C)
    x = (rng.standard_normal((T, C)) * 3 + 1).astype(np.float32)
    w = rng.standard_normal(C).astype(np.float32)
    b = rng.standard_normal(C).astype(np.float32)
    out = np.full((T, C), np.nan, np.float32)
    want = np.full((T, C), np.nan, np.float32)
    norm.layer_norm(out, x, w, b, 1e-5)
    ref.layer_norm(want, x, w, b, 1e-5)
    np.testing.assert_allclose(out, want, **tol["float32"])
    assert not np.isnan(out).any()
    if T and C > 1:
        m, v = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        np.testing.assert_allclose(want, (x - m) / np.sqrt(v + 1e-5) * w + b, rtol=1e-4, atol=1e-5)
