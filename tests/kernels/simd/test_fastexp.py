from __future__ import annotations

import math

import numpy as np
from numba import njit

from modelc.kernels.simd.fastexp import WEIGHT_CUT, exp_f32, exp_weight


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


@njit(cache=False)
def _weight(out, x):
    for i in range(x.size):
        out[i] = exp_weight(x[i])


def test_exp_weight_is_exp_above_the_cut_and_zero_below():
    """Attention weights: exp_f32 where x > WEIGHT_CUT, else 0, so no weight is subnormal (nor any product of one
    with a V element of fp16's or q8_0's range)."""
    x = np.concatenate([np.linspace(-100, 0, 100_001), [WEIGHT_CUT, np.nextafter(WEIGHT_CUT, np.float32(0)), -87.5,
                                                         -np.inf]]).astype(np.float32)  # fmt: skip
    out, want = np.full_like(x, np.nan), np.full_like(x, np.nan)
    _weight(out, x)
    _fast(want, x)
    above = x > WEIGHT_CUT
    np.testing.assert_array_equal(out[above], want[above])
    assert np.all(out[~above] == 0.0) and (~above).sum() > 40_000
    assert out[above].min() > 2.0**-64 and out[above].min() * np.float32(2.0**-24) > np.finfo(np.float32).tiny
