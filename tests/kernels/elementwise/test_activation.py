from __future__ import annotations

import math

import numpy as np
import pytest

from modelc.kernels.elementwise import activation
from modelc.kernels.reference import ref

SHAPES = [(1, 1), (1, 128), (5, 33), (0, 4)]


@pytest.mark.parametrize("T,F", SHAPES)
def test_silu_mul(T, F, tol):
    rng = np.random.default_rng(T + F)
    g = (rng.standard_normal((T, F)) * 4).astype(np.float32)
    u = rng.standard_normal((T, F)).astype(np.float32)
    out = np.full((T, F), np.nan, np.float32)
    want = np.full((T, F), np.nan, np.float32)
    activation.silu_mul(out, g, u)
    ref.silu_mul(want, g, u)
    np.testing.assert_allclose(out, want, **tol["float32"])
    np.testing.assert_allclose(want, g * (1 / (1 + np.exp(-g.astype(np.float64)))) * u, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("T,F", SHAPES)
@pytest.mark.parametrize("name", ["gelu", "gelu_erf"])
def test_gelu(T, F, name, tol):
    rng = np.random.default_rng(T * 3 + F)
    x = (rng.standard_normal((T, F)) * 3).astype(np.float32)
    out = np.full((T, F), np.nan, np.float32)
    want = np.full((T, F), np.nan, np.float32)
    getattr(activation, name)(out, x)
    getattr(ref, name)(want, x)
    np.testing.assert_allclose(out, want, **tol["float32"])
    assert not np.isnan(out).any()


def test_gelu_known_values():
    x = np.array([[0.0, 1.0, -1.0, 3.0]], np.float32)
    out = np.empty_like(x)
    activation.gelu_erf(out, x)
    exact = [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x[0]]
    np.testing.assert_allclose(out[0], exact, rtol=1e-6)
    activation.gelu(out, x)
    np.testing.assert_allclose(out[0], [0.0, 0.841192, -0.158808, 2.996363], rtol=1e-5)


@pytest.mark.parametrize("T,N", [(1, 1), (3, 50), (2, 32000), (0, 5)])
def test_softmax(T, N, tol):
    rng = np.random.default_rng(N)
    x = (rng.standard_normal((T, N)) * 10).astype(np.float32)
    out = np.full((T, N), np.nan, np.float32)
    want = np.full((T, N), np.nan, np.float32)
    activation.softmax(out, x)
    ref.softmax(want, x)
    np.testing.assert_allclose(out, want, **tol["float32"])
    if T:
        np.testing.assert_allclose(out.sum(-1), 1.0, rtol=1e-5)
