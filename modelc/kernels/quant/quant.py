"""Unpack stored weight rows to int8 + scales, dequantize them, and quantize activations.

Every quantized row unpacks to one normalized form the integer dot reads:
    w[i] = sc[i // 16] * q[i] - mn[i // 16]
with q int8 (C,), sc and mn float32 (C // 16,). For every type of at most 6
bits q is UNSIGNED (0..63; a signed code's offset is folded into mn), so the dot
needs no sign fix-up; Q8_0, Q8_K and I8 (SIGNED_KINDS) keep signed q and mn = 0.
The dequantizers expand that form to float32. No matmul here (gemm_int.py); numpy twins are in ref_linear.py.
Block layouts are GGML's (ggml-common.h); see ref_linear.py for the readable form.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange
from numba.extending import overload

from modelc.ir import DataType
from modelc.kernels.quant import quant_iq
from modelc.kernels.quant.quant_iq import unpack_iq
from modelc.kernels.simd.qdot import (
    amax32,
    bits32_i8x32,
    bits_i8x32,
    f16_at,
    f32_at,
    fma_f32x8,
    load_i8_f32x8,
    load_i8x32,
    nib16_i8x32,
    or_i8x32,
    quantize32,
    shl_i8x32,
    splat_f32x8,
    store_f32x8,
    store_i8x32,
)

# kind codes the kernels branch on (one per stored type they unpack)
KIND: dict[DataType, int] = {
    DataType.Q4_0: 0,
    DataType.Q4_1: 1,
    DataType.Q5_0: 2,
    DataType.Q5_1: 3,
    DataType.Q8_0: 4,
    DataType.Q2_K: 5,
    DataType.Q3_K: 6,
    DataType.Q4_K: 7,
    DataType.Q5_K: 8,
    DataType.Q6_K: 9,
    DataType.Q8_K: 10,
    DataType.I8: 11,
    DataType.I4: 12,
    DataType.IQ4_NL: quant_iq.IQ4_NL,
    DataType.IQ4_XS: quant_iq.IQ4_XS,
    DataType.MXFP4: quant_iq.MXFP4,
    DataType.TQ1_0: quant_iq.TQ1_0,
    DataType.TQ2_0: quant_iq.TQ2_0,
    DataType.Q1_0: quant_iq.Q1_0,
    DataType.Q2_0: quant_iq.Q2_0,
    DataType.IQ3_S: quant_iq.IQ3_S,
    DataType.IQ3_XXS: quant_iq.IQ3_XXS,
    DataType.IQ2_XXS: quant_iq.IQ2_XXS,
    DataType.IQ2_XS: quant_iq.IQ2_XS,
    DataType.IQ2_S: quant_iq.IQ2_S,
    DataType.IQ1_S: quant_iq.IQ1_S,
    DataType.IQ1_M: quant_iq.IQ1_M,
}
SIGNED = frozenset(
    {DataType.Q8_0, DataType.Q8_K, DataType.I8}
    | {dt for dt, k in KIND.items() if k >= quant_iq.FIRST_KIND and k not in quant_iq.UNSIGNED_KINDS}
)
"""Types whose unpacked q is signed int8 (full range); all others are unsigned 0..63 with an mn term."""


@njit(cache=True, nogil=True, inline="always")
def _fill2(sc, mn, g, s, m):
    sc[g] = s
    sc[g + 1] = s
    mn[g] = m
    mn[g + 1] = m


@njit(cache=True, nogil=True, inline="always")
def _unpack_32(kind, q, sc, mn, row, base):
    """Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0: 32-element blocks."""
    nb = q.shape[0] // 32
    tsize = 18 if kind == 0 else (20 if kind == 1 else (22 if kind == 2 else (24 if kind == 3 else 34)))
    for b in range(nb):
        o = base + b * tsize
        d = f16_at(row, o)
        m = np.float32(0.0)
        if kind == 0:
            m = np.float32(8.0) * d
            v = nib16_i8x32(row, o + 2)
        elif kind == 1:
            m = -f16_at(row, o + 2)
            v = nib16_i8x32(row, o + 4)
        elif kind == 2:
            m = np.float32(16.0) * d
            v = or_i8x32(nib16_i8x32(row, o + 6), bits32_i8x32(row, o + 2, 4))
        elif kind == 3:
            m = -f16_at(row, o + 2)
            v = or_i8x32(nib16_i8x32(row, o + 8), bits32_i8x32(row, o + 4, 4))
        else:
            v = load_i8x32(row, o + 2)
        store_i8x32(q, b * 32, v)
        _fill2(sc, mn, 2 * b, d, m)


@njit(cache=True, nogil=True, inline="always")
def _unpack_q4_q5_k(kind, q, sc, mn, row, base):
    nb = q.shape[0] // 256
    tsize = 144 if kind == 7 else 176
    qs_off = 16 if kind == 7 else 48
    for b in range(nb):
        o = base + b * tsize
        d = f16_at(row, o)
        dmin = f16_at(row, o + 2)
        for j in range(4):
            # chunk j takes its 6-bit scale/min from bytes a_j, m_j; chunk j+4 from md_j
            # plus the top bits of a_j, m_j (ref_linear.k_scale_min); both read the same qs bytes
            aj = np.int32(row[o + 4 + j])
            mj = np.int32(row[o + 8 + j])
            mdj = np.int32(row[o + 12 + j])
            qo = o + qs_off + (j // 2) * 32
            sh = 4 * (j % 2)
            v0 = bits_i8x32(row, qo, sh, 15)
            v1 = bits_i8x32(row, qo + 64, sh, 15)
            if kind == 8:
                v0 = or_i8x32(v0, shl_i8x32(bits_i8x32(row, o + 16, j, 1), 4))
                v1 = or_i8x32(v1, shl_i8x32(bits_i8x32(row, o + 16, j + 4, 1), 4))
            store_i8x32(q, b * 256 + j * 32, v0)
            store_i8x32(q, b * 256 + (j + 4) * 32, v1)
            _fill2(sc, mn, b * 16 + 2 * j, d * np.float32(aj & 63), dmin * np.float32(mj & 63))
            s1 = np.float32((mdj & 15) | ((aj >> 6) << 4))
            m1 = np.float32((mdj >> 4) | ((mj >> 6) << 4))
            _fill2(sc, mn, b * 16 + 2 * (j + 4), d * s1, dmin * m1)


@njit(cache=True, nogil=True, inline="always")
def _unpack_q2_q3_k(kind, q, sc, mn, row, base):
    nb = q.shape[0] // 256
    tsize = 84 if kind == 5 else 110
    for b in range(nb):
        o = base + b * tsize
        if kind == 5:
            d = f16_at(row, o + 80)
            dmin = f16_at(row, o + 82)
            for g in range(16):
                s = np.int32(row[o + g])
                sc[b * 16 + g] = d * np.float32(s & 15)
                mn[b * 16 + g] = dmin * np.float32(s >> 4)
            for c in range(8):
                v = bits_i8x32(row, o + 16 + (c // 4) * 32, 2 * (c % 4), 3)
                store_i8x32(q, b * 256 + c * 32, v)
        else:
            d = f16_at(row, o + 108)
            s = o + 96
            for g in range(16):
                lo = (np.int32(row[s + g]) & 15) if g < 8 else (np.int32(row[s + g - 8]) >> 4)
                hi = (np.int32(row[s + 8 + g % 4]) >> (2 * (g // 4))) & 3
                f = d * np.float32((lo | (hi << 4)) - 32)
                sc[b * 16 + g] = f
                mn[b * 16 + g] = np.float32(4.0) * f  # q = crumb + 4*hbit - 4
            for c in range(8):
                v = bits_i8x32(row, o + 32 + (c // 4) * 32, 2 * (c % 4), 3)
                v = or_i8x32(v, shl_i8x32(bits_i8x32(row, o, c, 1), 2))
                store_i8x32(q, b * 256 + c * 32, v)


@njit(cache=True, nogil=True, inline="always")
def _unpack_q6_k(q, sc, mn, row, base):
    nb = q.shape[0] // 256
    for b in range(nb):
        o = base + b * 210
        d = f16_at(row, o + 208)
        for g in range(16):
            f = d * np.float32(np.int8(row[o + 192 + g]))
            sc[b * 16 + g] = f
            mn[b * 16 + g] = np.float32(32.0) * f
        for c in range(8):
            h, s4 = c // 4, c % 4
            lo = bits_i8x32(row, o + h * 64 + (s4 % 2) * 32, 4 * (s4 // 2), 15)
            hi = bits_i8x32(row, o + 128 + h * 32, 2 * s4, 3)
            store_i8x32(q, b * 256 + c * 32, or_i8x32(lo, shl_i8x32(hi, 4)))


@njit(cache=True, nogil=True, inline="always")
def _unpack_plain(kind, q, sc, mn, row, base, rscale):
    """Q8_K (per 256 f32 scale), I8 and I4 (per-row scale)."""
    c = q.shape[0]
    if kind == 10:
        for b in range(c // 256):
            d = f32_at(row, base + b * 292)
            for j in range(8):
                store_i8x32(q, b * 256 + j * 32, load_i8x32(row, base + b * 292 + 4 + j * 32))
            for g in range(16):
                sc[b * 16 + g] = d
                mn[b * 16 + g] = 0.0
        return
    m = np.float32(0.0)
    if kind == 11:
        for j in range(c // 32):
            store_i8x32(q, j * 32, load_i8x32(row, base + j * 32))
    else:  # I4: two's-complement nibbles, low first; nibble ^ 8 = value + 8
        m = np.float32(8.0) * rscale
        for k in range(c // 2):
            v = np.int32(row[base + k])
            q[2 * k] = (v & 15) ^ 8
            q[2 * k + 1] = (v >> 4) ^ 8
    for g in range(c // 16):
        sc[g] = rscale
        mn[g] = m


@njit(cache=True, nogil=True)
def unpack_row(kind, q, sc, mn, w, base, rscale):
    """One stored row -> q (C,) int8, sc (C/16,) f32, mn (C/16,) f32 with w = sc*q - mn.

    kind: KIND code; w: all rows' bytes as a flat uint8 array, the row starting at
    byte `base` (flat + offset so no per-row view is made: numba refcounts views
    with atomics, which two threads fight over); rscale: the I8/I4 row scale.
    C must be a multiple of 32. Writes every element of q, sc, mn.
    """
    if kind <= 4:
        _unpack_32(kind, q, sc, mn, w, base)
    elif kind == 7 or kind == 8:
        _unpack_q4_q5_k(kind, q, sc, mn, w, base)
    elif kind == 5 or kind == 6:
        _unpack_q2_q3_k(kind, q, sc, mn, w, base)
    elif kind == 9:
        _unpack_q6_k(q, sc, mn, w, base)
    elif kind >= 13:  # i-quants, MXFP4, ternary (quant_iq.py)
        unpack_iq(kind, q, sc, mn, w, base)
    else:
        _unpack_plain(kind, q, sc, mn, w, base, rscale)


@njit(cache=True, nogil=True, inline="always")
def expand_row(out, o, q, sc, mn):
    """out[o:o+C] f32 = sc[k//16] * q[k] - mn[k//16] (the dequantized row); out flat f32."""
    for g in range(sc.shape[0]):
        s = splat_f32x8(sc[g])
        m = splat_f32x8(-mn[g])
        store_f32x8(out, o + g * 16, fma_f32x8(m, load_i8_f32x8(q, g * 16), s))
        store_f32x8(out, o + g * 16 + 8, fma_f32x8(m, load_i8_f32x8(q, g * 16 + 8), s))


@njit(cache=True, nogil=True, parallel=True)
def dequantize_rows_q(out, w, row_ids, kind, rscale):
    """out (R, C) f32 = dequantized rows w[row_ids] of a (N, row_bytes) uint8 table.

    parallel=True: prefill dequantizes whole matrices (N up to 32000) into the
    BLAS scratch; rows are independent. rscale: (N,) f32 for I8/I4, else (1,).
    C (= out.shape[1]) must be a multiple of 32.
    """
    r, c = out.shape
    nbytes = w.shape[1]
    wf = w.reshape(-1)
    of = out.reshape(-1)
    nchunk = max(1, min(r, r // 8))
    for ch in prange(nchunk):
        q = np.empty(c, np.int8)
        sc = np.empty(c // 16, np.float32)
        mn = np.empty(c // 16, np.float32)
        for i in range(ch * r // nchunk, (ch + 1) * r // nchunk):
            n = row_ids[i]
            rs = rscale[n] if rscale.shape[0] > 1 else rscale[0]
            unpack_row(kind, q, sc, mn, wf, n * nbytes, rs)
            expand_row(of, i * c, q, sc, mn)


def family(kind: int) -> np.ndarray:
    """rows_1t's last argument for `kind`: a zero-size array whose record dtype names the kind's family of types
    (unpack_row's branch), so that rows_1t compiles that branch only (_unpack_family)."""
    if kind <= 4:
        name = "q32"
    elif kind >= quant_iq.FIRST_KIND:
        name = "iq"
    else:
        name = {5: "q2_q3_k", 6: "q2_q3_k", 7: "q4_q5_k", 8: "q4_q5_k", 9: "q6_k"}.get(kind, "plain")
    return _FAMILIES[name]


_FAMILIES = {n: np.zeros(0, np.dtype([(n, np.uint8)])) for n in ("q32", "q2_q3_k", "q4_q5_k", "q6_k", "plain", "iq")}


def _unpack_family(kind, q, sc, mn, w, base, rscale, fam):
    """unpack_row, for a kind of the family `fam` names (family()); the Python form of the overload below."""
    unpack_row(kind, q, sc, mn, w, base, rscale)


@overload(_unpack_family)
def _unpack_of_family(kind, q, sc, mn, w, base, rscale, fam):
    name = next(iter(fam.dtype.fields))
    if name == "q32":
        return lambda kind, q, sc, mn, w, base, rscale, fam: _unpack_32(kind, q, sc, mn, w, base)
    if name == "q4_q5_k":
        return lambda kind, q, sc, mn, w, base, rscale, fam: _unpack_q4_q5_k(kind, q, sc, mn, w, base)
    if name == "q2_q3_k":
        return lambda kind, q, sc, mn, w, base, rscale, fam: _unpack_q2_q3_k(kind, q, sc, mn, w, base)
    if name == "q6_k":
        return lambda kind, q, sc, mn, w, base, rscale, fam: _unpack_q6_k(q, sc, mn, w, base)
    if name == "iq":
        return lambda kind, q, sc, mn, w, base, rscale, fam: unpack_iq(kind, q, sc, mn, w, base)
    return lambda kind, q, sc, mn, w, base, rscale, fam: _unpack_plain(kind, q, sc, mn, w, base, rscale)


@njit(cache=True, nogil=True)
def rows_1t(out, w, row_ids, kind, rscale, fam):
    """dequantize_rows_q on the calling thread only (a few rows: embedding lookups), for a kind of the family `fam`
    names (family(kind)): a lookup compiles its own type's unpacking, where a switch over every type (unpack_row's)
    compiled all of them (~8 of SmolLM2-135M's decode path's ~65 CPU-s of compiling, most of it the i-quants')."""
    r, c = out.shape
    nbytes = w.shape[1]
    wf = w.reshape(-1)
    of = out.reshape(-1)
    q = np.empty(c, np.int8)
    sc = np.empty(c // 16, np.float32)
    mn = np.empty(c // 16, np.float32)
    for i in range(r):
        n = row_ids[i]
        rs = rscale[n] if rscale.shape[0] > 1 else rscale[0]
        _unpack_family(kind, q, sc, mn, wf, n * nbytes, rs, fam)
        expand_row(of, i * c, q, sc, mn)


@njit(cache=True, nogil=True)
def quantized(x):
    """quantize_act of x (T, C) f32 into new arrays: (codes (T, C) int8, scales (T, C/32) f32, half-block sums
    (T, C/16) f32), what the int8-activation kernels take."""
    t, c = x.shape
    xq = np.empty((t, c), np.int8)
    xd = np.empty((t, c // 32), np.float32)
    xs = np.empty((t, c // 16), np.float32)
    quantize_act(xq, xd, xs, x)
    return xq, xd, xs


@njit(cache=True, nogil=True, parallel=True)
def quantized_rows(x):
    """quantized(x) with the rows (tokens) split between the threads: the same bits. Prefill's AMX matmuls quantize
    (T, C) activations per call (an 8B's down projection at 512 tokens: 29 MB of f32) on one thread otherwise, the
    other waiting."""
    t, c = x.shape
    xq = np.empty((t, c), np.int8)
    xd = np.empty((t, c // 32), np.float32)
    xs = np.empty((t, c // 16), np.float32)
    nchunk = max(1, min(t, 16))
    for ch in prange(nchunk):
        _quantize_rows(xq, xd, xs, x, ch * t // nchunk, (ch + 1) * t // nchunk)
    return xq, xd, xs


@njit(cache=True, nogil=True)
def quantize_act(xq, xd, xs, x):
    """Quantize activations to Q8_0-style blocks; the twin is ref_linear.quantize_act.

    x (T, C) f32 C-contig; xq (T, C) int8 = round-half-away(x * 127/amax) per 32-block;
    xd (T, C/32) f32 = amax/127; xs (T, C/16) f32 = xd * sum of the 16 xq in each half
    (for the min terms of Q4_1/Q5_1/K-quants). C % 32 == 0. No aliasing.
    """
    _quantize_rows(xq, xd, xs, x, 0, x.shape[0])


@njit(cache=True, nogil=True, inline="always")
def _quantize_rows(xq, xd, xs, x, a, b):
    """quantize_act of rows a..b-1."""
    c = x.shape[1]
    nb = c // 32
    xf = x.reshape(-1)
    qf = xq.reshape(-1)
    for i in range(a, b):
        for k in range(nb):
            o = i * c + k * 32
            amax = amax32(xf, o)
            d = amax / np.float32(127.0)
            inv = np.float32(127.0) / amax if amax > 0 else np.float32(0.0)
            s0, s1 = quantize32(xf, o, qf, o, inv)
            xd[i, k] = d
            xs[i, 2 * k] = d * np.float32(s0)
            xs[i, 2 * k + 1] = d * np.float32(s1)
