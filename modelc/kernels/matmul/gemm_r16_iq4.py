"""IQ4_NL / IQ4_XS matmul on weights repacked at load into groups of 16 interleaved rows (any T).

gemm_r16's layout and loop (one vpdpbusd against one activation's 4 bytes broadcast gives each lane
its own row's partial sum; the float work runs once per (16 rows, token, 32 elements)), with the
4-bit codes mapped through the IQ4 code book in registers: nibble -> KVALUES_IQ4NL + 128 (1..241)
by one byte shuffle (qdot_r16_iq4.lut_iq4_i8x64), and each block dot started at -128 * the block's
activation code sum (gemm_r16._offsets), so the int32 block dot is exactly sum(kvalue * x code).
Codes up to 241 need the exact wide dot (cpu.WIDE_DOT_EXACT: VNNI or the portable IR); on AVX2 without VNNI
the book's signed values go into the signed dot instead (gemm_r16.SIGNED_DOT, as Q8_0 there), no offset.

Layout of one 16-row group, a permutation of the file's bytes (same size):
  IQ4_NL, per 32-element block (288 bytes): Q4_0's, gemm_r16._repack: [16 fp16 d][4 chunks x 64
        bytes: chunk k, lane r = row r's code bytes 4k..4k+3] (low nibbles: elements 4k..4k+3, high
        nibbles: 16+4k..16+4k+3).
  IQ4_XS, per 256-element super-block (2176 bytes): [16 fp16 d][16 u16 scales_h][16 u32 scales_l]
        [32 chunks x 64 bytes: chunk k, lane r = row r's qs bytes 4k..4k+3]; sub-block ib is chunks
        4ib..4ib+3 (nibbles as IQ4_NL's block), its scale ((scales_l >> 4ib) & 15 | ((scales_h >> 2ib)
        & 3) << 4) - 32, times d.
Same numbers as ref_linear.matmul_qact up to float summation order.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from modelc.kernels.matmul.gemm_r16_parts import (
    GROUP,
    PREFETCH_BYTES,
    TOKEN_CHUNK,
    _ahead,
    _block_dot,
    _offsets,
    _store_acc,
)
from modelc.kernels.quant.quant_iq import IQ4_NL, IQ4_XS
from modelc.kernels.runtime.cpu import HAS_AVX512_VNNI, PREFETCH_T1
from modelc.kernels.simd.qdot import (
    load_f16x16,
    load_f32x16,
    mul_f32x16,
    splat_f32x16,
    store_f32x16,
    zeros_f32x16,
)
from modelc.kernels.simd.qdot_r16 import (
    add_i32x16,
    bits_i32x16,
    float_i32x16,
    load_u32x16,
    nib_hi_i8x64,
    nib_lo_i8x64,
    or_shl_i32x16,
    splat_i32x16,
)
from modelc.kernels.simd.qdot_r16_iq4 import CODE_OFFSET, load_u16x16, lut_iq4_i8x64
from modelc.kernels.simd.qdot_tile import fmadot_f32x16, load_i8x64

KINDS = frozenset({IQ4_NL, IQ4_XS})
NL_BYTES, XS_BYTES = 288, 2176  # one 16-row group of one block / super-block

PREFETCH_T1_IQ4 = PREFETCH_T1 and HAS_AVX512_VNNI
"""The one-token loop prefetches gemm_r16.PREFETCH_BYTES ahead where the one-token prefetch is on with AVX-512:
Emerald Rapids, both variants alternating in one process, streamed: IQ4_XS 13.9 -> 21.6 GB/s, IQ4_NL 19.7 ->
26.8 (5632 x 2048; 2048 x 5632 alike). On Zen 3's AVX2 path (look-up bound) it read less with it (IQ4_XS
16.2-16.7 against 17.4-20.6), and Zen 4 streamed more without any one-token prefetch."""


def repack_xs(src: np.ndarray, out: np.ndarray) -> None:
    """IQ4_XS (N, C/256 * 136) uint8 file rows -> out (N/16, C/256 * 2176) in the layout above."""
    _repack_xs(np.ascontiguousarray(src), out)


@njit(cache=True, nogil=True, parallel=True)
def _repack_xs(src, out):
    nb = src.shape[1] // 136
    for gi in prange(out.shape[0]):
        dst = out[gi]
        for r in range(GROUP):
            row = src[gi * GROUP + r]
            for b in range(nb):
                o = b * XS_BYTES
                p = b * 136
                for i in range(2):
                    dst[o + 2 * r + i] = row[p + i]  # d
                    dst[o + 32 + 2 * r + i] = row[p + 2 + i]  # scales_h
                for k in range(33):  # scales_l, then 32 code words
                    q = o + 64 + 64 * k + 4 * r
                    for i in range(4):
                        dst[q + i] = row[p + 4 + 4 * k + i]


@njit(cache=True, nogil=True, inline="always")
def _codes(rf, q):
    """The 8 looked-up code vectors of one 32-element block at byte q: elements 4k.. (u0-u3), 16+4k.. (u4-u7)."""
    c0, c1, c2, c3 = load_i8x64(rf, q), load_i8x64(rf, q + 64), load_i8x64(rf, q + 128), load_i8x64(rf, q + 192)
    u0, u1 = lut_iq4_i8x64(nib_lo_i8x64(c0)), lut_iq4_i8x64(nib_lo_i8x64(c1))
    u2, u3 = lut_iq4_i8x64(nib_lo_i8x64(c2)), lut_iq4_i8x64(nib_lo_i8x64(c3))
    u4, u5 = lut_iq4_i8x64(nib_hi_i8x64(c0)), lut_iq4_i8x64(nib_hi_i8x64(c1))
    u6, u7 = lut_iq4_i8x64(nib_hi_i8x64(c2)), lut_iq4_i8x64(nib_hi_i8x64(c3))
    return u0, u1, u2, u3, u4, u5, u6, u7


@njit(cache=True, nogil=True, inline="always")
def _block(acc, rf, q, f, xq, xo, s0, xdk):
    """acc + the 16 rows' block at byte q (scales f) dotted with xq[xo:xo+32] (code sum offset s0, scale xdk)."""
    u0, u1, u2, u3, u4, u5, u6, u7 = _codes(rf, q)
    return fmadot_f32x16(acc, _block_dot(s0, u0, u1, u2, u3, u4, u5, u6, u7, xq, xo, False), f, splat_f32x16(xdk))


@njit(cache=True, nogil=True, inline="always")
def _tokens(acc, rf, q, f, xq, sa, xd, k, t, c):
    """For each of t tokens: acc[16 j:] += the 16 rows' block k (at byte q, scales f) . token j's block k."""
    u0, u1, u2, u3, u4, u5, u6, u7 = _codes(rf, q)
    for j in range(t):
        xo = j * c + k * 32
        p = _block_dot(sa[j, k], u0, u1, u2, u3, u4, u5, u6, u7, xq, xo, False)
        store_f32x16(acc, j * 16, fmadot_f32x16(load_f32x16(acc, j * 16), p, f, splat_f32x16(xd[j, k])))


@njit(cache=True, nogil=True, inline="always")
def _xs_scale(d, sh, sl, ib):
    """d * (sub-block ib's 6-bit scale - 32) of 16 IQ4_XS rows."""
    ls = or_shl_i32x16(bits_i32x16(sl, 4 * ib, 15), bits_i32x16(sh, 2 * ib, 3), 4)
    return mul_f32x16(d, float_i32x16(add_i32x16(ls, splat_i32x16(-32))))


@njit(cache=True, nogil=True, inline="always")
def _group(out, xq, sa, xd, rf, gi, nb, t, c, acc, xs):
    """Rows 16 gi .. 16 gi + 15 for all t tokens (acc: (t * 16,) f32 scratch): nb IQ4_NL blocks, or IQ4_XS
    super-blocks where xs (a constant at each call: the other branch folds away)."""
    bb = XS_BYTES if xs else NL_BYTES
    acc[:] = 0.0
    base = gi * nb * bb
    pf = base + PREFETCH_BYTES
    for b in range(nb):
        o = base + b * bb
        pf = _ahead(rf, pf, o + (128 if xs else bb) + PREFETCH_BYTES)
        if xs:
            d, sh, sl = load_f16x16(rf, o), load_u16x16(rf, o + 32), load_u32x16(rf, o + 64)
            for ib in range(8):
                pf = _ahead(rf, pf, o + 128 + 256 * ib + 256 + PREFETCH_BYTES)
                _tokens(acc, rf, o + 128 + 256 * ib, _xs_scale(d, sh, sl, ib), xq, sa, xd, b * 8 + ib, t, c)
        else:
            _tokens(acc, rf, o + 32, load_f16x16(rf, o), xq, sa, xd, b, t, c)
    _store_acc(out, acc, gi, t)


@njit(cache=True, nogil=True, inline="always")
def _group_t1(out, xq, sa, xd, rf, gi, nb, xs):
    """_group for one token: the accumulator stays in a register; software prefetch where PREFETCH_T1_IQ4."""
    bb = XS_BYTES if xs else NL_BYTES
    acc = zeros_f32x16()
    base = gi * nb * bb
    pf = base + PREFETCH_BYTES
    for b in range(nb):
        o = base + b * bb
        if PREFETCH_T1_IQ4:
            pf = _ahead(rf, pf, o + (128 if xs else bb) + PREFETCH_BYTES)
        if xs:
            d, sh, sl = load_f16x16(rf, o), load_u16x16(rf, o + 32), load_u32x16(rf, o + 64)
            for ib in range(8):
                k = b * 8 + ib
                if PREFETCH_T1_IQ4:
                    pf = _ahead(rf, pf, o + 128 + 256 * ib + 256 + PREFETCH_BYTES)
                acc = _block(acc, rf, o + 128 + 256 * ib, _xs_scale(d, sh, sl, ib), xq, k * 32, sa[0, k], xd[0, k])
        else:
            acc = _block(acc, rf, o + 32, load_f16x16(rf, o), xq, b * 32, sa[0, b], xd[0, b])
    store_f32x16(out.reshape(-1), gi * 16, acc)


@njit(cache=True, nogil=True, parallel=True)
def _r16_iq4_nl(out, xq, xd, rw):
    t, c = xq.shape
    nb = c // 32
    sa = _offsets(xq, nb, np.int64(CODE_OFFSET))
    xqf = xq.reshape(-1)
    rf = rw.reshape(-1)
    if t == 1:
        for gi in prange(rw.shape[0]):
            _group_t1(out, xqf, sa, xd, rf, gi, nb, False)
        return
    for gi in prange(rw.shape[0]):
        acc = np.empty(min(t, TOKEN_CHUNK) * 16, np.float32)
        for t0 in range(0, t, TOKEN_CHUNK):
            t1 = min(t, t0 + TOKEN_CHUNK)
            _group(out[t0:t1], xqf[t0 * c : t1 * c], sa[t0:t1], xd[t0:t1], rf, gi, nb, t1 - t0, c, acc, False)


@njit(cache=True, nogil=True, parallel=True)
def _r16_iq4_xs(out, xq, xd, rw):
    t, c = xq.shape
    sa = _offsets(xq, c // 32, np.int64(CODE_OFFSET))
    xqf = xq.reshape(-1)
    rf = rw.reshape(-1)
    if t == 1:
        for gi in prange(rw.shape[0]):
            _group_t1(out, xqf, sa, xd, rf, gi, c // 256, True)
        return
    for gi in prange(rw.shape[0]):
        acc = np.empty(min(t, TOKEN_CHUNK) * 16, np.float32)
        for t0 in range(0, t, TOKEN_CHUNK):
            t1 = min(t, t0 + TOKEN_CHUNK)
            _group(out[t0:t1], xqf[t0 * c : t1 * c], sa[t0:t1], xd[t0:t1], rf, gi, c // 256, t1 - t0, c, acc, True)


@njit(cache=True, nogil=True)
def qmatmul(out, xq, xd, rw, kind):
    """out (T, N) f32 = dequant(W) @ x.T for W IQ4_NL / IQ4_XS repacked (gemm_r16.repack); xq (T, C) int8 and
    xd (T, C/32) f32 from quant.quantize_act. parallel=True over 16-row groups; the caller sets the threads."""
    if kind == IQ4_XS:
        _r16_iq4_xs(out, xq, xd, rw)
    else:
        _r16_iq4_nl(out, xq, xd, rw)
