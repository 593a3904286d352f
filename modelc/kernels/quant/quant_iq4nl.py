"""IQ4_NL quantization (pack time), numba: llama.cpp's quantize_iq4_nl without an importance matrix.

The same float32 operations in the same order as ggml-quants.c's quantize_row_iq4_nl_impl (ntry 7,
weights x^2), one block of 32 at a time, so the blocks are bit for bit llama.cpp's; numpy twin:
ref_quant_iq4nl.py (vectorized over blocks, ~20x slower). No fastmath: every rounding must stay.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from modelc.kernels.reference.ref_quant_iq4nl import KVALUES
from modelc.kernels.simd.half import float_to_half

_VALUES = KVALUES.astype(np.float32)
_EPS = np.float32(1e-15)


@njit(cache=True, nogil=True, inline="always")
def _best_index(values, x):
    """llama.cpp best_index_int8, branch-free: mu = how many entries are <= x (its binary search's upper end)."""
    if x <= values[0]:
        return 0
    if x >= values[15]:
        return 15
    mu = 0
    for i in range(16):
        mu += values[i] <= x
    return mu - 1 if x - values[mu - 1] < values[mu] - x else mu


@njit(cache=True, nogil=True, inline="always")
def _fit(values, xb, idv):
    """(sum w q x, sum w q q), w = x^2, q the table entries nearest to idv * x, sequential like the C loop."""
    sumqx = np.float32(0.0)
    sumq2 = np.float32(0.0)
    for j in range(32):
        q = values[_best_index(values, idv * xb[j])]
        wq = (xb[j] * xb[j]) * q
        sumqx += wq * xb[j]
        sumq2 += wq * q
    return sumqx, sumq2


@njit(cache=True, nogil=True, parallel=True)
def iq4_nl_quantize(x, out):
    """x (B, 32) float32 -> out (B, 18) uint8 IQ4_NL blocks (F16 scale, 16 bytes of index pairs j, j + 16)."""
    values = _VALUES
    for b in prange(x.shape[0]):
        xb = x[b]
        amax = np.float32(0.0)
        mx = np.float32(0.0)
        for j in range(32):
            ax = abs(xb[j])
            if ax > amax:
                amax = ax
                mx = xb[j]
        d = np.float32(0.0)
        if amax >= _EPS:
            d = -mx / values[0]
            sumqx, sumq2 = _fit(values, xb, np.float32(1.0) / d)
            d = sumqx / sumq2 if sumq2 > 0 else np.float32(0.0)
            best = d * sumqx
            for itry in range(-7, 8):
                idv = np.float32(itry + (-127)) / mx
                sx, s2 = _fit(values, xb, idv)
                if s2 > 0 and sx * sx > best * s2:
                    d = sx / s2
                    best = d * sx
        h = float_to_half(np.float32(d))
        out[b, 0] = h & 0xFF
        out[b, 1] = h >> 8
        inv = np.float32(1.0) / d if d != 0 else np.float32(0.0)
        for j in range(16):
            lo = _best_index(values, inv * xb[j])
            hi = _best_index(values, inv * xb[j + 16])
            out[b, 2 + j] = lo | (hi << 4)
