"""KV pages in q8_0 (int8 + one fp16 scale per block of QB head-dim elements), with an optional f32 hot copy.

QPages is what KVPages.layer() hands the models for the "q8_0" and "mixed" KV cache types; the
kv_write / paged_attention dispatchers send it to the kernels here and in attention_q8.py.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from modelc.kernels.simd.half import float_to_half, half_to_float


class QPages(NamedTuple):
    """One layer's K (or V) side of a q8_0 / mixed cache.

    data: (P, Z, K, D) int8, C-contiguous.  scales: (P, Z, K, NB) uint16 fp16 bits, NB = D // QB.
    hot_of: (P,) int32, page -> slot in `hot` holding its f32 copy, -1 = none (shared by all layers).
    hot: (PH, Z, K, D) float32.  window: a query at position pos reads row p from `hot` iff
    pos - p < window and the page has a hot slot (0 = never: plain q8_0).
    """

    data: np.ndarray
    scales: np.ndarray
    hot_of: np.ndarray
    hot: np.ndarray
    window: int

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape


def quant_block(D: int) -> int:
    """Elements per scale: 32 (llama.cpp's q8_0 block) when D allows it, else the whole head row."""
    return 32 if D % 32 == 0 else D


# error_model="numpy": no zero-division guard branches (see kv_write.py); amax == 0 is handled.
@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _quant_row(dst, dst_scales, x):
    """dst (D,) int8, dst_scales (NB,) uint16 <- x (D,) float32, per block: d = amax / 127, q = round(x / d)."""
    D = x.shape[0]
    NB = dst_scales.shape[0]
    QB = D // NB
    for b in range(NB):
        amax = np.float32(0.0)
        for i in range(QB):
            a = abs(x[b * QB + i])
            amax = a if a > amax else amax
        d = amax / np.float32(127.0)
        inv = np.float32(1.0) / d if d > 0 else np.float32(0.0)
        dst_scales[b] = float_to_half(d)
        for i in range(QB):
            dst[b * QB + i] = np.int8(np.floor(x[b * QB + i] * inv + np.float32(0.5)))


@njit(cache=True, nogil=True, error_model="numpy")
def kv_write_q8_plain(kq, ks, vq, vs, k, v, slots):
    """kv_write_q8 for a plain q8_0 cache (QPages.window 0: no hot copies), the same numbers: k[t], v[t] at
    slots[t] in q8_0 (what the decode layers write: kernels/layer/decode_layer.py)."""
    T, K, D = k.shape
    Z = kq.shape[1]
    for t in range(T):
        s = slots[t]
        if s < 0:
            continue
        page, off = s // Z, s % Z
        for h in range(K):
            _quant_row(kq[page, off, h], ks[page, off, h], k[t, h])
            _quant_row(vq[page, off, h], vs[page, off, h], v[t, h])


@njit(cache=True, nogil=True, error_model="numpy")
def kv_write_q8(kq, ks, vq, vs, hot_of, kh, vh, k, v, slots):
    """Write k[t], v[t] at slots[t] in q8_0, and as f32 into the page's hot slot where it has one.

    kq, vq: (P, Z, K, D) int8; ks, vs: (P, Z, K, NB) uint16; hot_of: (P,) int32;
    kh, vh: (PH, Z, K, D) float32; k, v: (T, K, D) float32; slots: (T,) int64, negative = skip.
    """
    kv_write_q8_plain(kq, ks, vq, vs, k, v, slots)
    Z = kq.shape[1]
    for t in range(k.shape[0]):
        s = slots[t]
        if s >= 0 and hot_of[s // Z] >= 0:
            kh[hot_of[s // Z], s % Z] = k[t]
            vh[hot_of[s // Z], s % Z] = v[t]


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def dequant_row(dst, q, scales):
    """dst (D,) float32 <- q (D,) int8 times its block's fp16 scale."""
    D = q.shape[0]
    NB = scales.shape[0]
    QB = D // NB
    for b in range(NB):
        d = half_to_float(scales[b])
        # NOTE: slice views indexed by the bare loop variable vectorize; `q[b * QB + i]` does not (KERNELS.md)
        src = q[b * QB : (b + 1) * QB]
        out = dst[b * QB : (b + 1) * QB]
        for i in range(QB):
            out[i] = np.float32(src[i]) * d


@njit(cache=True, nogil=True, error_model="numpy")
def gather_q8(out, data, scales, table, length):
    """out (length, K, D) float32 <- one sequence's rows 0..length-1, dequantized."""
    Z = data.shape[1]
    K = data.shape[2]
    for p in range(length):
        page = table[p // Z]
        for h in range(K):
            dequant_row(out[p, h], data[page, p % Z, h], scales[page, p % Z, h])
