"""IQ4_NL quantization, numpy reference: llama.cpp's quantize_iq4_nl without an importance matrix,
vectorized over blocks (kernels/quant/quant_iq4nl.py is the numba kernel pack uses; tests compare the two).

An IQ4_NL block is 32 weights as 4-bit indices into the fixed non-linear table KVALUES and one F16
scale (18 bytes). llama.cpp (ggml-quants.c, quantize_row_iq4_nl_impl with ntry 7, weights x^2)
starts from d = max / 127 (max: the signed value of largest magnitude), refines it by weighted least
squares, tries 15 more starting scales (itry - 127) / max and keeps the one with the best weighted
fit, then stores the scale as F16 and the indices nearest to x / scale. Every float32 operation here
runs in that order (sums over the 32 weights sequential, like the C loops), so the blocks come out
bit for bit as llama.cpp's quantizer writes them (checked against llama.cpp-quantized files in
tests/artifact/test_quantize_iq4nl.py).
"""

from __future__ import annotations

import numpy as np

F32 = np.float32
KVALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int8)
_VALUES = KVALUES.astype(F32)
_GROUP_MAX_EPS = F32(1e-15)
_NTRY = 7


def _best_index(al: np.ndarray) -> np.ndarray:
    """llama.cpp best_index_int8: the table entry nearest to each value (the lower one unless the upper is
    strictly nearer), clamped to the ends."""
    mu = np.clip(np.searchsorted(_VALUES, al, side="right"), 1, 15)  # _VALUES[mu - 1] <= al < _VALUES[mu]
    lo, hi = _VALUES[mu - 1], _VALUES[mu]
    idx = np.where(al - lo < hi - al, mu - 1, mu)
    idx = np.where(al <= _VALUES[0], 0, idx)
    return np.where(al >= _VALUES[15], 15, idx).astype(np.uint8)


def _sums(x: np.ndarray, w: np.ndarray, L: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """sum w*q*x and sum w*q*q over the 32 weights (axis 0), sequential float32 like the C loop."""
    q = _VALUES[L]
    wq = w * q
    return np.add.reduce(wq * x, axis=0, dtype=F32), np.add.reduce(wq * q, axis=0, dtype=F32)


def iq4_nl_blocks(blocks: np.ndarray) -> np.ndarray:
    """(B, 32) float32 -> (B, 18) uint8 IQ4_NL blocks: F16 scale, then 16 bytes of index pairs (j, j + 16)."""
    b = blocks.shape[0]
    x = np.ascontiguousarray(blocks.astype(F32, copy=False).T)  # (32, B)
    w = x * x
    ax = np.abs(x)
    amax = ax.max(axis=0)
    mx = np.take_along_axis(x, ax.argmax(axis=0)[None, :], axis=0)[0]  # the first weight of largest magnitude
    live = amax >= _GROUP_MAX_EPS
    safe_mx = np.where(live, mx, F32(1))
    with np.errstate(divide="ignore", invalid="ignore"):
        d = -safe_mx / _VALUES[0]
        sumqx, sumq2 = _sums(x, w, _best_index((F32(1) / d) * x))
        d = np.where(sumq2 > 0, sumqx / sumq2, F32(0))
        best = d * sumqx
        for itry in range(-_NTRY, _NTRY + 1):
            idv = F32(itry + int(KVALUES[0])) / safe_mx
            sx, s2 = _sums(x, w, _best_index(idv * x))
            better = (s2 > 0) & (sx * sx > best * s2)
            d = np.where(better, sx / s2, d)
            best = np.where(better, d * sx, best)
        d = np.where(live, d, F32(0)).astype(F32)
        inv = np.where(d != 0, F32(1) / np.where(d != 0, d, F32(1)), F32(0)).astype(F32)
    L = _best_index(inv * x)  # (32, B)
    out = np.empty((b, 18), np.uint8)
    out[:, :2] = d.astype("<f2").view(np.uint8).reshape(b, 2)
    out[:, 2:] = (L[:16] | (L[16:] << 4)).T
    return out
