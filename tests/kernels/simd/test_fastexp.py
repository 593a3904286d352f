from __future__ import annotations

import math

import numpy as np
from numba import njit

from modelc.kernels.simd.fastexp import exp_f32


@njit(cache=False)  # test helpers are not cached: pytest may import this module under another name
def _fast(out, x):
    for i in range(x.size):
        out[i] = exp_f32(x[i])


def _ref(x):
    return np.exp(x.astype(np.float64))


def test_exp_f32_matches_exp_within_2ulp():
    x = np.concatenate([np.linspace(-87, 88, 200_001), np.random.default_rng(0).standard_normal(10_000) * 10,
                        [0.0, -0.0, 1.0, -1.0, 1e-8, -1e-8]]).astype(np.float32)  # fmt: skip
    out = np.full_like(x, np.nan)
    _fast(out, x)
    want = _ref(x)
    rel = np.abs(out - want) / want
    assert rel.max() < 2.5e-7  # ~2 ulp of float32
    assert out[x == 0][0] == 1.0


def test_exp_f32_clamps_out_of_range():
    x = np.array([-1000, -100, 100, 1000, math.inf, -math.inf], np.float32)
    out = np.full_like(x, np.nan)
    _fast(out, x)
    assert np.all(np.isfinite(out)) and np.all(out >= 0)
    assert out[0] < 1e-37 and out[3] > 1e38
