"""Shared pieces of the register tiles (gemm_tile, gemm_tile8): per-type unpack dispatch, result writes.

Each helper is inlined into the tile code with the type code `kind` a constant, so
the branches fold away.
"""

from __future__ import annotations

from numba import njit

from modelc.kernels.simd.qdot import hsum_f32x16
from modelc.kernels.simd.qdot_tile import (
    q4_0_pair,
    q4_k_codes,
    q4_k_scales,
    q6_k_codes,
    q6_k_scales,
    q8_0_pair,
)


@njit(cache=True, nogil=True, inline="always")
def write(out, r, n, ts, c):
    if r < n:
        for j in range(len(ts)):
            out[ts[j], r] = hsum_f32x16(c[j])


@njit(cache=True, nogil=True, inline="always")
def row_bases(r, n, nbytes):
    """Byte offsets of rows r..r+3 (rows past the end repeat the last; their results are dropped)."""
    return r * nbytes, min(r + 1, n - 1) * nbytes, min(r + 2, n - 1) * nbytes, min(r + 3, n - 1) * nbytes


@njit(cache=True, nogil=True, inline="always")
def pair(kind, wf, o0, o1):
    """Blocks at byte o0 and o1 of a Q4_0 / Q8_0 row -> (64 codes, lane scales)."""
    if kind == 0:
        return q4_0_pair(wf, o0, o1)
    return q8_0_pair(wf, o0, o1)


@njit(cache=True, nogil=True, inline="always")
def kscales(kind, wf, o):
    if kind == 7:
        return q4_k_scales(wf, o)
    return q6_k_scales(wf, o)


@njit(cache=True, nogil=True, inline="always")
def kcodes(kind, wf, o, h):
    """Half h (128 elements) of the super-block at byte o -> two groups of 64 codes."""
    if kind == 7:
        return q4_k_codes(wf, o + 16 + h * 64)
    return q6_k_codes(wf, o + h * 64, o + 128 + h * 32)
