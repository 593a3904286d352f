from __future__ import annotations

import numpy as np
import pytest

from modelc.kernels.elementwise import encoder
from modelc.kernels.reference import ref_encoder


@pytest.mark.parametrize("n", [0, 1, 7, 1000])
@pytest.mark.parametrize("name", ["erf", "gelu_erf"])
def test_kernel_matches_reference(name: str, n: int) -> None:
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    if n:
        x[0] = 0.0
    got = np.full(n, np.nan, np.float32)
    want = np.full(n, np.nan, np.float32)
    getattr(encoder, name)(got, x)
    getattr(ref_encoder, name)(want, x)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=2e-6)


def test_erf_known_values() -> None:
    x = np.array([0.0, 1.0, -1.0, 10.0], np.float32)
    out = np.empty_like(x)
    encoder.erf(out, x)
    np.testing.assert_allclose(out, [0.0, 0.8427007929, -0.8427007929, 1.0], rtol=1e-6, atol=5e-7)


def test_in_place() -> None:
    x = np.linspace(-4, 4, 33, dtype=np.float32)
    want = np.empty_like(x)
    ref_encoder.gelu_erf(want, x)
    encoder.gelu_erf(x, x)
    np.testing.assert_allclose(x, want, rtol=1e-6, atol=2e-6)
