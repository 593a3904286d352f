"""Q6_K matmul on weights repacked at load into groups of 16 interleaved rows (any T; gemm_r16's scheme).

Q6_K stores each 256-element super-block as 128 bytes `ql` (low 4 bits), 64 bytes `qh` (high 2
bits), 16 int8 sub-block scales (one per 16 elements) and an fp16 d: element 128 h + 32 m + l
(h < 2, m < 4, l < 32) is d * scale[8 h + 2 m + l // 16] * (q - 32) with q = nibble (low of ql
byte 64 h + l for m = 0, of 64 h + 32 + l for m = 1, the high nibbles for m = 2, 3) | bits 2m, 2m+1
of qh byte 32 h + l, << 4. The codes 0..63 go into the unsigned side of the dot (exact on every
path: pair sums stay under int16), and -32 * (the 16 activation codes' sum) starts each sub-block.

Layout of one (16-row group, super-block), 3360 bytes (a permutation of the 16 rows' 210-byte blocks):
  [0:32]       16 fp16 d, row order
  [32:288]     the scales: byte 32 + 16 s + r = row r's scale s (a 16-byte load, sign-extended, is
               sub-block s's scales of the 16 rows)
  [288 + 1536 h:]  half h (h < 2) in the order the kernels read it, three runs of 8 chunks of 64 bytes
               (chunk k, lane r = 4 bytes of row r): qh bytes 32 h + 4k..4k+3, ql bytes 64 h + 4k..,
               ql bytes 64 h + 32 + 4k..
Chunk k of the three runs holds elements 4k..4k+3 (+ 32, + 64, + 96) of the half: `_six` unpacks
each of the four. (qh after all of ql, as in the file, streamed at ~0.75x on the T=1 kernel: the
reads of a super-block jumped back and forth.)
Same numbers as ref_linear.matmul_qact up to float summation order.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from modelc.kernels.matmul.gemm_r16_parts import (
    GROUP,
    PREFETCH_BYTES,
    TOKEN_CHUNK,
    _ahead,
    _ahead_t1,
    _dot4_u6,
    _load8,
    _offsets,
    _store_acc,
    pairs_t1,
)
from modelc.kernels.simd.qdot import (
    fma_f32x16,
    load_f16x16,
    load_f32x16,
    mul_f32x16,
    splat_f32x16,
    store_f32x16,
    zeros_f32x16,
)
from modelc.kernels.simd.qdot_r16 import add_i32x16, float_i32x16, mul_i32x16, splat_i32x16
from modelc.kernels.simd.qdot_tile import I8x64, I32x16, _check_1d, _load, fmadot_f32x16, load_i8x64

BYTES = 3360  # one 16-row group of one super-block
BLOCK = 210  # one row's super-block in the file
ELEMS = 256

_v64i8 = ir.VectorType(ir.IntType(8), 64)
_v16i8 = ir.VectorType(ir.IntType(8), 16)
_v16i32 = ir.VectorType(ir.IntType(32), 16)


def _six(m: int):
    """The intrinsic for item m (m < 4) of a (ql chunk, qh chunk) pair: the 6-bit codes 0..63 of elements
    32 m + 4k .. of a half: (ql & 15 for m < 2, ql >> 4 for m >= 2) | ((qh >> 2m) & 3) << 4, per byte."""

    def six(typingctx, ql, qh):
        if not (ql == I8x64 and qh == I8x64):
            return None

        def codegen(context, builder, sig, args):
            q, h = args
            nib = (
                builder.and_(q, ir.Constant(_v64i8, [15] * 64))
                if m < 2
                else builder.lshr(q, ir.Constant(_v64i8, [4] * 64))
            )
            if m < 2:
                h = builder.shl(h, ir.Constant(_v64i8, [4 - 2 * m] * 64))
            elif m == 3:
                h = builder.lshr(h, ir.Constant(_v64i8, [2] * 64))
            return builder.or_(nib, builder.and_(h, ir.Constant(_v64i8, [0x30] * 64)))

        return I8x64(ql, qh), codegen

    six.__name__ = f"six{m}_i8x64"
    return intrinsic(six)


six0_i8x64, six1_i8x64, six2_i8x64, six3_i8x64 = (_six(m) for m in range(4))


@intrinsic
def load_s8_i32x16(typingctx, ary, idx):
    """The 16 int8 at byte idx of a 1-D C uint8 array, sign-extended to I32x16."""
    if not (_check_1d(ary) and ary.dtype == types.uint8 and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        return builder.sext(_load(context, builder, sig.args[0], args[0], args[1], _v16i8), _v16i32)

    return I32x16(ary, idx), codegen


def _sext_lane(lane: int):
    """The intrinsic for bytes 16 lane .. 16 lane + 15 of an I8x64, sign-extended to I32x16."""

    def sext(typingctx, v):
        if v != I8x64:
            return None

        def codegen(context, builder, sig, args):
            idx = ir.Constant(ir.VectorType(ir.IntType(32), 16), list(range(16 * lane, 16 * lane + 16)))
            return builder.sext(builder.shuffle_vector(args[0], ir.Constant(_v64i8, None), idx), _v16i32)

        return I32x16(v), codegen

    sext.__name__ = f"sext{lane}_i32x16"
    return intrinsic(sext)


sext0_i32x16, sext1_i32x16, sext2_i32x16, sext3_i32x16 = (_sext_lane(i) for i in range(4))


def repack(blocks: np.ndarray) -> np.ndarray:
    """(N, C/256 * 210) uint8 Q6_K in file layout -> (N/16, C/256 * 3360) uint8 (a new array; the twin is
    ref_r16.repack)."""
    n, row_bytes = blocks.shape
    out = np.empty((n // GROUP, (row_bytes // BLOCK) * BYTES), np.uint8)
    _repack(np.ascontiguousarray(blocks), out)
    return out


@njit(cache=True, nogil=True, parallel=True)
def _repack(src, out):
    nb = src.shape[1] // 210
    for gi in prange(out.shape[0]):
        dst = out[gi]
        for r in range(16):
            row = src[gi * 16 + r]
            for b in range(nb):
                o = b * 3360
                p = b * 210
                dst[o + 2 * r] = row[p + 208]
                dst[o + 2 * r + 1] = row[p + 209]
                for s in range(16):
                    dst[o + 32 + 16 * s + r] = row[p + 192 + s]
                for h in range(2):
                    for k in range(8):
                        q = o + 288 + 1536 * h + 64 * k + 4 * r
                        for i in range(4):
                            dst[q + i] = row[p + 128 + 32 * h + 4 * k + i]  # qh
                            dst[q + 512 + i] = row[p + 64 * h + 4 * k + i]  # ql, low 32 bytes of the half
                            dst[q + 1024 + i] = row[p + 64 * h + 32 + 4 * k + i]  # ql, high 32


@njit(cache=True, nogil=True, inline="always")
def _tokens(
    acc, xq, xd, so, t, c, bq, s, f0, f1, f2, f3, u0, u1, u2, u3, u4, u5, u6, u7, v0, v1, v2, v3, v4, v5, v6, v7
):
    """acc[16 tt:] += the 16 rows' dots with token tt's 32-element blocks bq (codes u, scales f0, f1) and
    bq + 1 (codes v, scales f2, f3), for every token; s = bq's first 16-element sub-block."""
    for tt in range(t):
        xo = tt * c + 32 * bq
        p0 = _dot4_u6(splat_i32x16(so[tt, s]), u0, u1, u2, u3, xq, xo)
        p1 = _dot4_u6(splat_i32x16(so[tt, s + 1]), u4, u5, u6, u7, xq, xo + 16)
        p2 = _dot4_u6(splat_i32x16(so[tt, s + 2]), v0, v1, v2, v3, xq, xo + 32)
        p3 = _dot4_u6(splat_i32x16(so[tt, s + 3]), v4, v5, v6, v7, xq, xo + 48)
        a = load_f32x16(acc, tt * 16)
        w0 = fma_f32x16(mul_f32x16(float_i32x16(p0), f0), float_i32x16(p1), f1)
        w1 = fma_f32x16(mul_f32x16(float_i32x16(p2), f2), float_i32x16(p3), f3)
        a = fma_f32x16(a, w0, splat_f32x16(xd[tt, bq]))
        a = fma_f32x16(a, w1, splat_f32x16(xd[tt, bq + 1]))
        store_f32x16(acc, tt * 16, a)


@njit(cache=True, nogil=True, inline="always")
def _group(out, xq, xd, so, rf, gi, nsb, t, c, acc):
    """Rows 16 gi .. 16 gi + 15 for all t tokens (acc: (t * 16,) f32 scratch). Per half of a super-block,
    two passes over its ql/qh chunks: the low nibbles (32-blocks m = 0, 1), then the high (m = 2, 3)."""
    acc[:] = 0.0
    base = gi * nsb * 3360
    pf = base  # linear.chunked hands out a few groups at a time: the previous group was not this one's neighbour
    for sb in range(nsb):
        o = base + sb * 3360
        pf = _ahead(rf, pf, o + 288 + PREFETCH_BYTES)
        d = load_f16x16(rf, o)
        for h in range(2):
            q, a, b = o + 288 + 1536 * h, o + 800 + 1536 * h, o + 1312 + 1536 * h
            for hi in range(2):
                pf = _ahead(rf, pf, q + 768 * (hi + 1) + PREFETCH_BYTES)
                m = 2 * hi  # 32-blocks m (ql chunks a) and m + 1 (ql chunks b) of the half
                sc = o + 32 + 16 * (8 * h + 2 * m)
                f0, f1 = (
                    mul_f32x16(d, float_i32x16(load_s8_i32x16(rf, sc))),
                    mul_f32x16(d, float_i32x16(load_s8_i32x16(rf, sc + 16))),
                )
                f2, f3 = (
                    mul_f32x16(d, float_i32x16(load_s8_i32x16(rf, sc + 32))),
                    mul_f32x16(d, float_i32x16(load_s8_i32x16(rf, sc + 48))),
                )
                h0, h1, h2, h3, h4, h5, h6, h7 = _load8(rf, q)
                a0, a1, a2, a3, a4, a5, a6, a7 = _load8(rf, a)
                b0, b1, b2, b3, b4, b5, b6, b7 = _load8(rf, b)
                bq = sb * 8 + 4 * h + m
                if hi == 0:
                    _tokens(acc, xq, xd, so, t, c, bq, 2 * bq, f0, f1, f2, f3,
                            six0_i8x64(a0, h0), six0_i8x64(a1, h1), six0_i8x64(a2, h2), six0_i8x64(a3, h3),
                            six0_i8x64(a4, h4), six0_i8x64(a5, h5), six0_i8x64(a6, h6), six0_i8x64(a7, h7),
                            six1_i8x64(b0, h0), six1_i8x64(b1, h1), six1_i8x64(b2, h2), six1_i8x64(b3, h3),
                            six1_i8x64(b4, h4), six1_i8x64(b5, h5), six1_i8x64(b6, h6), six1_i8x64(b7, h7))  # fmt: skip
                else:
                    _tokens(acc, xq, xd, so, t, c, bq, 2 * bq, f0, f1, f2, f3,
                            six2_i8x64(a0, h0), six2_i8x64(a1, h1), six2_i8x64(a2, h2), six2_i8x64(a3, h3),
                            six2_i8x64(a4, h4), six2_i8x64(a5, h5), six2_i8x64(a6, h6), six2_i8x64(a7, h7),
                            six3_i8x64(b0, h0), six3_i8x64(b1, h1), six3_i8x64(b2, h2), six3_i8x64(b3, h3),
                            six3_i8x64(b4, h4), six3_i8x64(b5, h5), six3_i8x64(b6, h6), six3_i8x64(b7, h7))  # fmt: skip
    _store_acc(out, acc, gi, t)


@njit(cache=True, nogil=True, inline="always")
def _block_t1(acc, d, xq, xd, so, s0, s1, bq, u0, u1, u2, u3, u4, u5, u6, u7):
    """acc + the 16 rows' dots with 32-element block bq of the one token (codes u, the two sub-blocks'
    scales s0, s1): the two sub-blocks' integer dots weighted by their integer scales, one float fma."""
    p0 = _dot4_u6(splat_i32x16(so[0, 2 * bq]), u0, u1, u2, u3, xq, 32 * bq)
    p1 = _dot4_u6(splat_i32x16(so[0, 2 * bq + 1]), u4, u5, u6, u7, xq, 32 * bq + 16)
    p = add_i32x16(mul_i32x16(p0, s0), mul_i32x16(p1, s1))
    return fmadot_f32x16(acc, p, d, splat_f32x16(xd[0, bq]))


@njit(cache=True, nogil=True, inline="always")
def _sb_t1(acc, pf, xq, xd, so, rf, o, sb):
    """Super-block sb (at byte o) of one group for the one token: (acc, pf) after it (_group_t1)."""
    pf = _ahead_t1(rf, pf, o + 288 + PREFETCH_BYTES)
    d = load_f16x16(rf, o)
    # scale s of the 16 rows at byte 32 + 16 s: vector v holds sub-blocks 4 v .. 4 v + 3
    c0, c1, c2, c3 = (
        load_i8x64(rf, o + 32),
        load_i8x64(rf, o + 96),
        load_i8x64(rf, o + 160),
        load_i8x64(rf, o + 224),
    )
    for h in range(2):
        q, a, b = o + 288 + 1536 * h, o + 800 + 1536 * h, o + 1312 + 1536 * h
        lo = c0 if h == 0 else c2  # sub-blocks 8 h .. 8 h + 3: 32-blocks m = 0, 1 of the half
        hi = c1 if h == 0 else c3  # 8 h + 4 .. 8 h + 7: m = 2, 3
        bq = sb * 8 + 4 * h
        pf = _ahead_t1(rf, pf, a + 512 + PREFETCH_BYTES)
        h0, h1, h2, h3, h4, h5, h6, h7 = _load8(rf, q)
        a0, a1, a2, a3, a4, a5, a6, a7 = _load8(rf, a)
        acc = _block_t1(acc, d, xq, xd, so, sext0_i32x16(lo), sext1_i32x16(lo), bq,
                        six0_i8x64(a0, h0), six0_i8x64(a1, h1), six0_i8x64(a2, h2), six0_i8x64(a3, h3),
                        six0_i8x64(a4, h4), six0_i8x64(a5, h5), six0_i8x64(a6, h6), six0_i8x64(a7, h7))  # fmt: skip
        acc = _block_t1(acc, d, xq, xd, so, sext0_i32x16(hi), sext1_i32x16(hi), bq + 2,
                        six2_i8x64(a0, h0), six2_i8x64(a1, h1), six2_i8x64(a2, h2), six2_i8x64(a3, h3),
                        six2_i8x64(a4, h4), six2_i8x64(a5, h5), six2_i8x64(a6, h6), six2_i8x64(a7, h7))  # fmt: skip
        pf = _ahead_t1(rf, pf, b + 512 + PREFETCH_BYTES)
        a0, a1, a2, a3, a4, a5, a6, a7 = _load8(rf, b)
        acc = _block_t1(acc, d, xq, xd, so, sext2_i32x16(lo), sext3_i32x16(lo), bq + 1,
                        six1_i8x64(a0, h0), six1_i8x64(a1, h1), six1_i8x64(a2, h2), six1_i8x64(a3, h3),
                        six1_i8x64(a4, h4), six1_i8x64(a5, h5), six1_i8x64(a6, h6), six1_i8x64(a7, h7))  # fmt: skip
        acc = _block_t1(acc, d, xq, xd, so, sext2_i32x16(hi), sext3_i32x16(hi), bq + 3,
                        six3_i8x64(a0, h0), six3_i8x64(a1, h1), six3_i8x64(a2, h2), six3_i8x64(a3, h3),
                        six3_i8x64(a4, h4), six3_i8x64(a5, h5), six3_i8x64(a6, h6), six3_i8x64(a7, h7))  # fmt: skip
    return acc, pf


@njit(cache=True, nogil=True, inline="always")
def _group_t1(out, xq, xd, so, rf, gi, nsb):
    """_group for one token: the accumulator stays in a register, codes are unpacked where used.

    A super-block's 256 scale bytes are loaded first, four 64-byte vectors, and each sub-block's 16 scales
    sign-extended from them where used, so the group is read strictly front to back; prefetched
    gemm_r16.PREFETCH_BYTES ahead where cpu.PREFETCH_T1 (Emerald Rapids: 17.4 -> 28.1 GB/s streamed).
    Reading each sub-block's scales from memory where used (the header's lines touched again between the
    code runs) needed a prefetch burst ahead and still streamed slower: TinyLlama-shaped matrices, 2 threads,
    Zen 4, one process alternating the two: 2048 x 5632 23.1 vs 17.2 GB/s, 32000 x 2048 25.7 vs 17.7
    (Q4_K's one-token loop on the same shapes: 22.1 and 26.7). The prefetch runs a part at a time (the scale
    header, then each 512-byte run of codes; gemm_r16_parts.PREFETCH_BYTES), into L2 where cpu.PREFETCH_L2."""
    acc = zeros_f32x16()
    base = gi * nsb * 3360
    pf = base + PREFETCH_BYTES
    for sb in range(nsb):
        acc, pf = _sb_t1(acc, pf, xq, xd, so, rf, base + sb * 3360, sb)
    store_f32x16(out.reshape(-1), gi * 16, acc)


@njit(cache=True, nogil=True, inline="always")
def _pair_t1(out, xq, xd, so, rf, gi, nsb):
    """_group_t1 of groups gi and gi + 1 at once, their super-blocks alternating (gemm_r16_parts.pairs_t1)."""
    a0, a1 = zeros_f32x16(), zeros_f32x16()
    b0 = gi * nsb * 3360
    b1 = b0 + nsb * 3360
    p0, p1 = b0 + PREFETCH_BYTES, b1 + PREFETCH_BYTES
    for sb in range(nsb):
        a0, p0 = _sb_t1(a0, p0, xq, xd, so, rf, b0 + sb * 3360, sb)
        a1, p1 = _sb_t1(a1, p1, xq, xd, so, rf, b1 + sb * 3360, sb)
    store_f32x16(out.reshape(-1), gi * 16, a0)
    store_f32x16(out.reshape(-1), gi * 16 + 16, a1)


@njit(cache=True, nogil=True)
def _offsets16(xq):
    """(T, C/16) int32: -32 * the sum of each 16-element sub-block's activation codes."""
    return _offsets(xq, xq.shape[1] // 16, np.int64(32))


@njit(cache=True, nogil=True, parallel=True)
def qmatmul(out, xq, xd, rw):
    """out (T, N) f32 = dequant(W) @ x.T for a Q6_K W repacked by `repack` (rw (N/16, C/256 * 3360) uint8);
    xq (T, C) int8, xd (T, C/32) f32 from quant.quantize_act. parallel=True over 16-row groups."""
    t, c = xq.shape
    so = _offsets16(xq)
    xqf = xq.reshape(-1)
    rf = rw.reshape(-1)
    if t == 1:
        ng = rw.shape[0]
        for i in prange(pairs_t1(ng)):
            if 2 * i + 1 < ng:
                _pair_t1(out, xqf, xd, so, rf, 2 * i, c // 256)
            else:
                _group_t1(out, xqf, xd, so, rf, 2 * i, c // 256)
        return
    for gi in prange(rw.shape[0]):
        acc = np.empty(min(t, TOKEN_CHUNK) * 16, np.float32)
        for t0 in range(0, t, TOKEN_CHUNK):
            t1 = min(t, t0 + TOKEN_CHUNK)
            _group(out[t0:t1], xqf[t0 * c : t1 * c], xd[t0:t1], so[t0:t1], rf, gi, c // 256, t1 - t0, c, acc)
