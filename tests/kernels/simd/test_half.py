from __future__ import annotations

import numpy as np
from numba import njit

from modelc.kernels.simd.half import float_to_half, half_to_float


@njit(cache=False)  # test helpers are not cached: pytest may import this module under another name
def _roundtrip(bits, out_f32, out_bits):
    for i in range(bits.size):
        out_f32[i] = half_to_float(bits[i])
    for i in range(out_f32.size):
        out_bits[i] = float_to_half(out_f32[i] * np.float32(3.0))


def test_half_conversions_match_numpy():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(1000) * 1000, [0.0, -0.0, np.inf, -np.inf, 65504, 6e-8]]).astype(np.float16)
    f = np.full(x.size, np.nan, np.float32)
    b = np.zeros(x.size, np.uint16)
    _roundtrip(x.view(np.uint16), f, b)
    np.testing.assert_array_equal(f, x.astype(np.float32))
    with np.errstate(over="ignore"):  # 65504 * 3 overflows to inf, as in the kernel
        want = (x.astype(np.float32) * 3).astype(np.float16)
    np.testing.assert_array_equal(b, want.view(np.uint16))
