"""Q4_0 / Q4_1 / Q8_0 / Q4_K matmul on weights repacked at load into groups of 16 interleaved rows (any T);
IQ4_NL / IQ4_XS in gemm_r16_iq4 (same layout idea, codes through the code book in registers).

NOTE: with row-major blocks, the int8 dot of one (row, token) pair fills a vector with partial
sums of that one pair, so converting and scaling them (3 float ops) costs as much as the dot
itself, once per (row, token, 64 elements): the register tiles ran at ~65 GOPS per core. Here
a block of 16 rows is stored lane-interleaved (`repack`): vector chunk k holds bytes 4k..4k+3 of
each of the 16 rows, so a dot against one activation's 4 bytes, broadcast, gives each lane its
own row's partial sum; after a block's dots each lane holds a whole block dot, and the float
work is one convert + scale + fma per (16 rows, token, block). The weights are unpacked once
per block and used for every token. Same layout size as the file (a permutation of its bytes).

Layout of one (16-row group, 32-element block), `BYTES[kind]` bytes:
  Q4_0: [16 fp16 scales d_r][4 chunks x 64 bytes: chunk k, lane r = row r's code bytes 4k..4k+3]
        (low nibbles: elements 4k..4k+3, high nibbles: 16+4k..16+4k+3; code - 8)
  Q4_1: [16 fp16 scales d_r][16 fp16 mins m_r][4 chunks x 64 bytes as Q4_0's] (w = d * code + m: the block dot
        of the codes times d, plus m times the block's activation sum, a float fma of its own)
  Q8_0: [16 fp16 scales][8 chunks x 64 bytes: chunk k, lane r = row r's codes 4k..4k+3] (signed;
        the dot takes them as code + 128 where cpu.WIDE_DOT_EXACT, else signed: SIGNED_DOT)
The code offsets (-8, -128) start each block dot at -offset * (the block's activation code sum).
Same numbers as ref_linear.matmul_qact up to float summation order.
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
from numba import njit, prange

from modelc.ir import DataType
from modelc.kernels.matmul import gemm_r16_iq4, gemm_r16_q6k
from modelc.kernels.matmul.gemm_r16_parts import (
    GROUP,
    PREFETCH_BYTES,
    PREFETCH_L2,
    SIGNED_DOT,
    TOKEN_CHUNK,
    _ahead,
    _ahead_t1,
    _block_dot,
    _dot8_u4,
    _load8,
    _offsets,
    _scale_min,
    _store_acc,
    steps,
)
from modelc.kernels.quant.quant import KIND, quantized
from modelc.kernels.quant.quant_iq import IQ4_NL, IQ4_XS
from modelc.kernels.simd.qdot import (
    add_f32x16,
    fma_f32x16,
    load_f16x16,
    load_f32x16,
    mul_f32x16,
    splat_f32x16,
    store_f32x16,
    zeros_f32x16,
)
from modelc.kernels.simd.qdot_r16 import (
    bcast4_i8x64,
    bits_i32x16,
    flip_i8x64,
    float_i32x16,
    load_u32x16,
    mul_i32x16,
    nib_hi16_i8x64,
    nib_hi_i8x64,
    nib_lo_i8x64,
    or_shl_i32x16,
    splat_i32x16,
    sra4_i32x16,
    sub_i32x16,
)
from modelc.kernels.simd.qdot_tile import (
    WIDE_DOT_EXACT,
    dot_u8x64,
    fmadot_f32x16,
    load_i8x64,
)

Q4_0, Q4_1, Q8_0, Q4_K = KIND[DataType.Q4_0], KIND[DataType.Q4_1], KIND[DataType.Q8_0], KIND[DataType.Q4_K]
Q6_K = KIND[DataType.Q6_K]
R16_KINDS = frozenset({Q4_0, Q4_1, Q8_0, Q4_K, Q6_K, IQ4_NL, IQ4_XS})
"""Kinds repacked and multiplied here (IQ4_NL / IQ4_XS in gemm_r16_iq4, Q6_K in gemm_r16_q6k)."""
PAIRED_T1 = frozenset({Q4_0, Q4_1, Q8_0, Q6_K})
LINE_T1 = WIDE_DOT_EXACT and PREFETCH_L2
"""Q4_K's one-token loop reads its codes a line at a time onto running chains (_run_dots): where the dot takes
codes up to 255 (VNNI, for the high nibbles in place) and on the CPUs it was measured on (cpu.PREFETCH_L2: Intel's
AMX server cores); elsewhere 8 lines at a time, as before (the AVX2 path sums 8 of them in int16 first)."""
"""Kinds whose one-token kernel steps through its prange two groups at a time (gemm_r16_parts.pairs_t1)."""

# one 16-row group of one block (Q4_K, Q6_K, IQ4_XS: of a 256-element super-block)
BYTES = {Q4_0: 288, Q4_1: 320, Q8_0: 544, Q4_K: 2304, Q6_K: 3360, IQ4_NL: 288, IQ4_XS: 2176}
_BLOCK = {Q4_0: 18, Q4_1: 20, Q8_0: 34, Q4_K: 144, Q6_K: 210, IQ4_NL: 18, IQ4_XS: 136}  # one row's block in the file
_ELEMS = {Q4_0: 32, Q4_1: 32, Q8_0: 32, Q4_K: 256, Q6_K: 256, IQ4_NL: 32, IQ4_XS: 256}
_HEADS = {Q4_1: 2}
"""The fp16 fields a 32-element block starts with (d; Q4_1: d and m), where not one."""


def can_repack(dtype: DataType, rows: int, cols: int) -> bool:
    kind = KIND.get(dtype)
    return kind in R16_KINDS and rows % GROUP == 0 and rows > 0 and cols % _ELEMS[kind] == 0 and cols > 0


def repack(blocks: np.ndarray, dtype: DataType) -> np.ndarray:
    """(N, C/32 * block bytes) uint8 in file layout -> (N/16, C/32 * BYTES) uint8 interleaved (a new array).

    A numba loop over the groups (the numpy twin, ref_r16.repack, moved ~0.25 GB/s: a 1.1B Q4_0
    model took 3-6 s to load instead of ~1)."""
    kind = KIND[dtype]
    if kind == Q6_K:
        return gemm_r16_q6k.repack(blocks)
    n, row_bytes = blocks.shape
    bs = _BLOCK[kind]
    out = np.empty((n // GROUP, (row_bytes // bs) * BYTES[kind]), np.uint8)
    if kind == Q4_K:
        _repack_q4_k(np.ascontiguousarray(blocks), out)
    elif kind == IQ4_XS:
        gemm_r16_iq4.repack_xs(blocks, out)
    else:  # Q4_0, Q4_1, Q8_0, IQ4_NL (same block shape as Q4_0)
        _repack(np.ascontiguousarray(blocks), out, bs, _HEADS.get(kind, 1))
    return out


@njit(cache=True, nogil=True, parallel=True)
def _repack_q4_k(src, out):
    """Per super-block of 16 rows: [16 fp16 d][16 fp16 dmin][3 x 64: the 12 scale bytes as 4-byte words,
    lane r = row r's][32 x 64: qs bytes 4k..4k+3 of each row] (2304 bytes)."""
    nb = src.shape[1] // 144
    for gi in prange(out.shape[0]):
        dst = out[gi]
        for r in range(GROUP):
            row = src[gi * GROUP + r]
            for b in range(nb):
                o = b * 2304
                p = b * 144
                for i in range(2):
                    dst[o + 2 * r + i] = row[p + i]
                    dst[o + 32 + 2 * r + i] = row[p + 2 + i]
                for k in range(35):  # 3 scale words, then 32 code words
                    q = o + 64 + 64 * k + 4 * r
                    for i in range(4):
                        dst[q + i] = row[p + 4 + 4 * k + i]


@njit(cache=True, nogil=True, parallel=True)
def _repack(src, out, bs, heads):
    """out (N/16, nb * bb) from src (N, nb * bs): per block, the 16 rows' fp16 fields (`heads` of them: d, or d
    and m; 16 of each, row order), then 4-byte code chunks."""
    nb = src.shape[1] // bs
    chunks = (bs - 2 * heads) // 4
    bb = 32 * heads + 64 * chunks
    for gi in prange(out.shape[0]):
        dst = out[gi]
        for r in range(GROUP):
            row = src[gi * GROUP + r]
            for b in range(nb):
                o = b * bb
                p = b * bs
                for h in range(heads):
                    dst[o + 32 * h + 2 * r] = row[p + 2 * h]
                    dst[o + 32 * h + 2 * r + 1] = row[p + 2 * h + 1]
                for k in range(chunks):
                    q = o + 32 * heads + 64 * k + 4 * r
                    for i in range(4):
                        dst[q + i] = row[p + 2 * heads + 4 * k + i]


@njit(cache=True, nogil=True, inline="always")
def _codes(rf, q, kind):
    """The 8 code vectors of one 16-row Q4_0 (kind 0) or Q8_0 block whose chunks start at byte q:
    elements 4k..4k+3 (u0-u3) and 16+4k..16+4k+3 (u4-u7), unsigned (Q4_0: code, Q8_0: code + 128) but
    Q8_0's signed codes where SIGNED_DOT."""
    if kind == 0:  # low nibbles: elements 4k..4k+3, high nibbles: 16+4k..
        q0, q1, q2, q3 = load_i8x64(rf, q), load_i8x64(rf, q + 64), load_i8x64(rf, q + 128), load_i8x64(rf, q + 192)
        u0, u1, u2, u3 = nib_lo_i8x64(q0), nib_lo_i8x64(q1), nib_lo_i8x64(q2), nib_lo_i8x64(q3)
        u4, u5, u6, u7 = nib_hi_i8x64(q0), nib_hi_i8x64(q1), nib_hi_i8x64(q2), nib_hi_i8x64(q3)
        return u0, u1, u2, u3, u4, u5, u6, u7
    c0, c1, c2, c3, c4, c5, c6, c7 = _load8(rf, q)
    if SIGNED_DOT:
        return c0, c1, c2, c3, c4, c5, c6, c7
    return flip_i8x64(c0), flip_i8x64(c1), flip_i8x64(c2), flip_i8x64(c3), flip_i8x64(c4), flip_i8x64(c5), flip_i8x64(c6), flip_i8x64(c7)  # fmt: skip


@njit(cache=True, nogil=True, inline="always")
def _layout(kind):
    """(bytes of a 16-row block, offset of its codes, nibble codes) for Q4_0 (kind 0), Q4_1 or Q8_0."""
    if kind == Q4_1:
        return 320, 64, True
    if kind == 0:
        return 288, 32, True
    return 544, 32, False


@njit(cache=True, nogil=True, inline="always")
def _group(out, xq, sa, xd, xm, rf, gi, nb, kind, t, c, acc):
    """Rows 16 gi .. 16 gi + 15 for all t tokens (acc: (t * 16,) f32 scratch); sa: each block dot's integer start
    (the code offset's term; zeros for Q4_1); xm: Q4_1's per-block activation sums (T, C/32) (the mins' term;
    not read for the other kinds)."""
    bb, co, nibbles = _layout(kind)
    acc[:] = 0.0
    base = gi * nb * bb
    pf = base + PREFETCH_BYTES
    for b in range(nb):
        o = base + b * bb
        pf = _ahead(rf, pf, o + bb + PREFETCH_BYTES)
        d = load_f16x16(rf, o)
        m = load_f16x16(rf, o + 32) if kind == Q4_1 else d  # Q4_1's mins
        u0, u1, u2, u3, u4, u5, u6, u7 = _codes(rf, o + co, 0 if nibbles else kind)
        for j in range(t):
            xo = j * c + b * 32
            p = _block_dot(sa[j, b], u0, u1, u2, u3, u4, u5, u6, u7, xq, xo, nibbles)
            a = fmadot_f32x16(load_f32x16(acc, j * 16), p, d, splat_f32x16(xd[j, b]))
            if kind == Q4_1:
                a = fma_f32x16(a, m, splat_f32x16(xm[j, b]))
            store_f32x16(acc, j * 16, a)
    _store_acc(out, acc, gi, t)


@njit(cache=True, nogil=True, inline="always")
def _block_t1(acc, macc, pf, xq, sa, xd, xm, rf, o, b, kind):
    """Block b (at byte o) of one group for the one token: (acc, macc, pf) after it, the block dot added to acc,
    Q4_1's mins term to macc, and the prefetch (_ahead_t1) taken to PREFETCH_BYTES past the block."""
    bb, co, nibbles = _layout(kind)
    pf = _ahead_t1(rf, pf, o + bb + PREFETCH_BYTES)
    u0, u1, u2, u3, u4, u5, u6, u7 = _codes(rf, o + co, 0 if nibbles else kind)
    p = _block_dot(sa[0, b], u0, u1, u2, u3, u4, u5, u6, u7, xq, b * 32, nibbles)
    acc = fmadot_f32x16(acc, p, load_f16x16(rf, o), splat_f32x16(xd[0, b]))
    if kind == Q4_1:
        macc = fma_f32x16(macc, load_f16x16(rf, o + 32), splat_f32x16(xm[0, b]))
    return acc, macc, pf


@njit(cache=True, nogil=True, inline="always")
def _store_t1(out, acc, macc, gi, kind):
    """out[0, 16 gi .. 16 gi + 15] = acc (+ Q4_1's mins term macc)."""
    if kind == Q4_1:
        acc = add_f32x16(acc, macc)
    store_f32x16(out.reshape(-1), gi * 16, acc)


@njit(cache=True, nogil=True, inline="always")
def _group_t1(out, xq, sa, xd, xm, rf, gi, nb, kind):
    """_group for one token: the accumulator stays in a register (no store and reload per block; Q4_1's mins
    in a second one); software prefetch only where PREFETCH_T1 (see PREFETCH_BYTES)."""
    bb = _layout(kind)[0]
    acc = zeros_f32x16()
    macc = zeros_f32x16()
    base = gi * nb * bb
    pf = base + PREFETCH_BYTES
    for b in range(nb):
        acc, macc, pf = _block_t1(acc, macc, pf, xq, sa, xd, xm, rf, base + b * bb, b, kind)
    _store_t1(out, acc, macc, gi, kind)


@njit(cache=True, nogil=True, inline="always")
def _pair_t1(out, xq, sa, xd, xm, rf, gi, nb, kind):
    """_group_t1 of groups gi and gi + 1 at once, their blocks alternating: two streams through memory
    (gemm_r16_parts.pairs_t1); each group's sums in the same order as alone, so the same bits."""
    bb = _layout(kind)[0]
    a0, m0, a1, m1 = zeros_f32x16(), zeros_f32x16(), zeros_f32x16(), zeros_f32x16()
    b0 = gi * nb * bb
    b1 = b0 + nb * bb
    p0, p1 = b0 + PREFETCH_BYTES, b1 + PREFETCH_BYTES
    for b in range(nb):
        a0, m0, p0 = _block_t1(a0, m0, p0, xq, sa, xd, xm, rf, b0 + b * bb, b, kind)
        a1, m1, p1 = _block_t1(a1, m1, p1, xq, sa, xd, xm, rf, b1 + b * bb, b, kind)
    _store_t1(out, a0, m0, gi, kind)
    _store_t1(out, a1, m1, gi + 1, kind)


@njit(cache=True, nogil=True, inline="always")
def _tokens_q4_k(acc, xq, xd, xm, t, c, xo, k, f, g, u0, u1, u2, u3, u4, u5, u6, u7):
    """acc[16 tt:] += the 16 rows' Q4_K sub-block k for every token tt: codes u0..u7 (its 32 elements, starting at
    column xo) dotted with the activations, times f (d * scale) and the activation scale, minus g (dmin * min)
    times the activation sum."""
    for tt in range(t):
        p = _dot8_u4(splat_i32x16(0), u0, u1, u2, u3, u4, u5, u6, u7, xq, tt * c + xo)
        v = fmadot_f32x16(load_f32x16(acc, tt * 16), p, f, splat_f32x16(xd[tt, k]))
        store_f32x16(acc, tt * 16, fma_f32x16(v, g, splat_f32x16(-xm[tt, k])))


@njit(cache=True, nogil=True, inline="always")
def _group_q4_k(out, xq, xd, xm, rf, gi, nsb, t, c, acc, fs):
    """Rows 16 gi .. 16 gi + 15 of a Q4_K weight for all t tokens. acc (t * 16,) f32 scratch; fs (256,)
    f32 scratch: per sub-block s, d * scale_s (fs[16 s:]) and dmin * min_s (fs[128 + 16 s:]) of the 16 rows.

    The token loop runs once per sub-block (low nibbles, then high), so 8 code vectors are live in it, not 16
    (32 of AVX2's 16 ymm registers): on Zen 3, 2 threads, 2048 x 5632, trees alternated 3 times, T = 16 read
    52-56 -> 52-66 GB/s, T = 8 27-48 -> 47-54; TinyLlama Q4_K_M batched decode 1.16-1.17x at 8 and 16 streams."""
    acc[:] = 0.0
    base = gi * nsb * 2304
    pf = base + PREFETCH_BYTES
    for sb in range(nsb):
        o = base + sb * 2304
        pf = _ahead(rf, pf, o + 256 + PREFETCH_BYTES)
        d = load_f16x16(rf, o)
        dm = load_f16x16(rf, o + 32)
        a = load_u32x16(rf, o + 64)
        m = load_u32x16(rf, o + 128)
        md = load_u32x16(rf, o + 192)
        for k in range(8):  # d * scale and dmin * min of each sub-block, 16 rows at once
            sc, mn = _scale_min(a, m, md, k)
            store_f32x16(fs, 16 * k, mul_f32x16(d, float_i32x16(sc)))
            store_f32x16(fs, 128 + 16 * k, mul_f32x16(dm, float_i32x16(mn)))
        for j in range(4):  # 64 elements: low nibbles = sub-block 2j, high nibbles = sub-block 2j + 1
            q = o + 256 + 512 * j
            pf = _ahead(rf, pf, q + 512 + PREFETCH_BYTES)
            c0, c1, c2, c3, c4, c5, c6, c7 = _load8(rf, q)
            l0, l1, l2, l3 = nib_lo_i8x64(c0), nib_lo_i8x64(c1), nib_lo_i8x64(c2), nib_lo_i8x64(c3)
            l4, l5, l6, l7 = nib_lo_i8x64(c4), nib_lo_i8x64(c5), nib_lo_i8x64(c6), nib_lo_i8x64(c7)
            h0, h1, h2, h3 = nib_hi_i8x64(c0), nib_hi_i8x64(c1), nib_hi_i8x64(c2), nib_hi_i8x64(c3)
            h4, h5, h6, h7 = nib_hi_i8x64(c4), nib_hi_i8x64(c5), nib_hi_i8x64(c6), nib_hi_i8x64(c7)
            s0 = 2 * j
            f0, f1 = load_f32x16(fs, 16 * s0), load_f32x16(fs, 16 * s0 + 16)
            g0, g1 = load_f32x16(fs, 128 + 16 * s0), load_f32x16(fs, 128 + 16 * s0 + 16)
            k = sb * 8 + s0  # sub-block 2j (low nibbles) for every token, then 2j + 1 (high)
            _tokens_q4_k(acc, xq, xd, xm, t, c, sb * 256 + 64 * j, k, f0, g0, l0, l1, l2, l3, l4, l5, l6, l7)
            _tokens_q4_k(acc, xq, xd, xm, t, c, sb * 256 + 64 * j + 32, k + 1, f1, g1, h0, h1, h2, h3, h4, h5, h6, h7)
    _store_acc(out, acc, gi, t)


@njit(cache=True, nogil=True, inline="always")
def _byte_i32x16(v, k):
    """Byte k of each lane of v, 0..255."""
    return bits_i32x16(v, 8 * k, 255)


@njit(cache=True, nogil=True, inline="always")
def _run_dots(lo, hi, rf, q, pf, xq, xo):
    """The 16 rows' dots of one 512-byte run of Q4_K codes at byte q (low nibbles with the activations at xo, high
    nibbles with those at xo + 32), one line at a time: each line prefetched (_ahead_t1), loaded and dotted onto
    two running chains, lo and hi, that go on from run to run; returns (lo, hi, pf) after the run, and the run's
    dots are the chains' differences (exact: int32 arithmetic wraps, |dot| < 2^20). The high nibbles go in in
    place (c & 0xF0: 16 x the code, one op a line instead of a shift and a mask), so hi grows by 16 x their dot.
    Only where the dot takes codes up to 255 (WIDE_DOT_EXACT)."""
    for i in range(8):
        pf = _ahead_t1(rf, pf, q + 64 * i + 64 + PREFETCH_BYTES)
        c = load_i8x64(rf, q + 64 * i)
        lo = dot_u8x64(lo, nib_lo_i8x64(c), bcast4_i8x64(xq, xo + 4 * i))
        hi = dot_u8x64(hi, nib_hi16_i8x64(c), bcast4_i8x64(xq, xo + 32 + 4 * i))
    return lo, hi, pf


@njit(cache=True, nogil=True, inline="always")
def _group_q4_k_t1(out, xq, xd, xm, rf, gi, nsb):
    """_group_q4_k for one token: the accumulator stays in a register, and a super-block's work is arranged
    for fewer vector ops than _group_q4_k's (float sums in another order, so not its bits):
    - the 16 rows' 8 scales and 8 mins are unpacked to bytes once (sclo, schi, mnlo, mnhi: byte s % 4 of a
      lane is its row's scale or min s), where ggml's get_scale_min_k4 per sub-block took up to 12 ops;
    - each sub-block's integer dot is multiplied by its integer scale (exact: |p * sc| < 2^22, so its float
      is too) and summed with the activation scales; d and dmin multiply once per super-block.
    Hot (in cache, 64 groups of a 2048-column matrix, 2 threads, Zen 4): 67 -> 78 GB/s on AVX-512, 48 ->
    53 on the AVX2 path; streamed from memory the matmul moved 0-2% (the reads dominate).

    Where LINE_T1 the codes are read a line at a time onto two chains that run through the whole group
    (_run_dots), not a 512-byte run's 8 lines loaded at once and dotted from zero: the same integers, the same
    bits, and on Emerald Rapids (2 threads, an 8B's matrices streamed, both alternating in one process) 24.0 ->
    28.7 and 23.4 -> 28.7 GB/s (28672 x 4096, 4096 x 14336: 76% -> 90% of the 2-thread read probe). A kernel
    that only reads the same bytes (one dot a line) streams at 92-101%; the 8-line form streamed at ~80% even
    with no scale work at all, and its prefetch distance (4-32 KiB), prefetcht0, pairs, a split in contiguous
    chunks, loads one run ahead or chains continued across its runs moved it 0-5% (docs/benchmarks.md, issue 42,
    2026-12-07 night)."""
    acc = zeros_f32x16()
    base = gi * nsb * 2304
    pf = base + PREFETCH_BYTES
    lo = splat_i32x16(0)
    hi = splat_i32x16(0)
    for sb in range(nsb):
        o = base + sb * 2304
        pf = _ahead_t1(rf, pf, o + 256 + PREFETCH_BYTES)
        a = load_u32x16(rf, o + 64)
        m = load_u32x16(rf, o + 128)
        md = load_u32x16(rf, o + 192)
        sclo = bits_i32x16(a, 0, 0x3F3F3F3F)  # scales 0..3
        mnlo = bits_i32x16(m, 0, 0x3F3F3F3F)  # mins 0..3
        schi = or_shl_i32x16(bits_i32x16(md, 0, 0x0F0F0F0F), bits_i32x16(a, 6, 0x03030303), 4)  # scales 4..7
        mnhi = or_shl_i32x16(bits_i32x16(md, 4, 0x0F0F0F0F), bits_i32x16(m, 6, 0x03030303), 4)  # mins 4..7
        sacc = zeros_f32x16()  # sum over sub-blocks s of dot_s * scale_s * xd_s
        macc = zeros_f32x16()  # sum of min_s * xm_s
        for j in range(4):  # sub-blocks 2j (low nibbles) and 2j + 1 (high nibbles)
            sv = sclo if j < 2 else schi
            mv = mnlo if j < 2 else mnhi
            b0 = (2 * j) % 4
            q = o + 256 + 512 * j
            xo = sb * 256 + 64 * j
            if LINE_T1:
                lo2, hi2, pf = _run_dots(lo, hi, rf, q, pf, xq, xo)
                p = sub_i32x16(lo2, lo)
                p2 = sra4_i32x16(sub_i32x16(hi2, hi))
                lo, hi = lo2, hi2
            else:
                pf = _ahead_t1(rf, pf, q + 512 + PREFETCH_BYTES)
                c0, c1, c2, c3, c4, c5, c6, c7 = _load8(rf, q)
                p = _dot8_u4(splat_i32x16(0), nib_lo_i8x64(c0), nib_lo_i8x64(c1), nib_lo_i8x64(c2), nib_lo_i8x64(c3),
                             nib_lo_i8x64(c4), nib_lo_i8x64(c5), nib_lo_i8x64(c6), nib_lo_i8x64(c7), xq, xo)  # fmt: skip
                p2 = _dot8_u4(splat_i32x16(0), nib_hi_i8x64(c0), nib_hi_i8x64(c1), nib_hi_i8x64(c2), nib_hi_i8x64(c3),
                              nib_hi_i8x64(c4), nib_hi_i8x64(c5), nib_hi_i8x64(c6), nib_hi_i8x64(c7), xq, xo + 32)  # fmt: skip
            k = sb * 8 + 2 * j
            sacc = fma_f32x16(sacc, float_i32x16(mul_i32x16(p, _byte_i32x16(sv, b0))), splat_f32x16(xd[0, k]))
            sacc = fma_f32x16(sacc, float_i32x16(mul_i32x16(p2, _byte_i32x16(sv, b0 + 1))), splat_f32x16(xd[0, k + 1]))
            macc = fma_f32x16(macc, float_i32x16(_byte_i32x16(mv, b0)), splat_f32x16(-xm[0, k]))
            macc = fma_f32x16(macc, float_i32x16(_byte_i32x16(mv, b0 + 1)), splat_f32x16(-xm[0, k + 1]))
        acc = fma_f32x16(acc, load_f16x16(rf, o), sacc)
        acc = fma_f32x16(acc, load_f16x16(rf, o + 32), macc)
    store_f32x16(out.reshape(-1), gi * 16, acc)


@njit(cache=True, nogil=True, parallel=True)
def _r16_q4_k(out, xq, xd, xs, rw):
    t, c = xq.shape
    xm = _sums32(xs)  # the mins' term
    xqf = xq.reshape(-1)
    rf = rw.reshape(-1)
    if t == 1:  # one group a step: pairs (pairs_t1) streamed 12-18% slower on an 8B's gate|up (Emerald Rapids)
        for gi in prange(rw.shape[0]):
            _group_q4_k_t1(out, xqf, xd, xm, rf, gi, c // 256)
        return
    for gi in prange(rw.shape[0]):
        acc = np.empty(min(t, TOKEN_CHUNK) * 16, np.float32)
        fs = np.empty(256, np.float32)
        for t0 in range(0, t, TOKEN_CHUNK):
            t1 = min(t, t0 + TOKEN_CHUNK)
            _group_q4_k(out[t0:t1], xqf[t0 * c : t1 * c], xd[t0:t1], xm[t0:t1], rf, gi, c // 256, t1 - t0, c, acc, fs)


@njit(cache=True, nogil=True)
def _sums32(xs):
    """(T, C/32) per-32 activation sums from quantize_act's (T, C/16) half-block sums."""
    t, h = xs.shape
    xm = np.empty((t, h // 2), np.float32)
    for i in range(t):
        for b in range(h // 2):
            xm[i, b] = xs[i, 2 * b] + xs[i, 2 * b + 1]
    return xm


@njit(cache=True, nogil=True, inline="always")
def _group_any_t(out, xq, sa, xd, xm, rw, gi, kind):
    """Rows 16 gi .. 16 gi + 15 of a 32-element block kind (Q4_0, Q4_1, Q8_0; a constant in each caller) for every
    token: _group_t1 at one token, else _group TOKEN_CHUNK tokens at a time. At one token gi is a step of the
    prange over pairs_t1(groups), groups 2 gi and 2 gi + 1 (_pair_t1; the last alone where the count is odd)."""
    t, c = xq.shape
    nb = c // 32
    xqf = xq.reshape(-1)
    rf = rw.reshape(-1)
    if t == 1:
        if 2 * gi + 1 < rw.shape[0]:
            _pair_t1(out, xqf, sa, xd, xm, rf, 2 * gi, nb, kind)
        else:
            _group_t1(out, xqf, sa, xd, xm, rf, 2 * gi, nb, kind)
        return
    acc = np.empty(min(t, TOKEN_CHUNK) * 16, np.float32)
    for t0 in range(0, t, TOKEN_CHUNK):
        t1 = min(t, t0 + TOKEN_CHUNK)
        _group(out[t0:t1], xqf[t0 * c : t1 * c], sa[t0:t1], xd[t0:t1], xm[t0:t1], rf, gi, nb, kind, t1 - t0, c, acc)


@njit(cache=True, nogil=True, parallel=True)
def _r16_q4_0(out, xq, xd, rw):
    sa = _offsets(xq, xq.shape[1] // 32, np.int64(8))  # codes 0..15 for w / d + 8
    for gi in prange(steps(rw.shape[0], xq.shape[0])):
        _group_any_t(out, xq, sa, xd, xd, rw, gi, Q4_0)


@njit(cache=True, nogil=True, parallel=True)
def _r16_q4_1(out, xq, xd, xs, rw):
    sa = _offsets(xq, xq.shape[1] // 32, np.int64(0))  # codes 0..15 for (w - m) / d: every block dot starts at 0
    xm = _sums32(xs)  # the mins' term: each block's activation sum
    for gi in prange(steps(rw.shape[0], xq.shape[0])):
        _group_any_t(out, xq, sa, xd, xm, rw, gi, Q4_1)


@njit(cache=True, nogil=True, parallel=True)
def _r16_q8_0(out, xq, xd, rw):
    sa = _offsets(xq, xq.shape[1] // 32, np.int64(0 if SIGNED_DOT else 128))  # signed codes, or code + 128
    for gi in prange(steps(rw.shape[0], xq.shape[0])):
        _group_any_t(out, xq, sa, xd, xd, rw, gi, Q8_0)


@njit(cache=True, nogil=True)
def qmatmul_r16(out, xq, xd, xs, rw, kind):
    """out (T, N) f32 = dequant(W) @ x.T, W repacked by `repack` (rw (N/16, C/32 * BYTES) uint8).

    xq (T, C) int8, xd (T, C/32), xs (T, C/16) f32 from quant.quantize_act; every row of out is written.
    parallel=True over 16-row groups; the caller sets the thread count.
    """
    if kind == Q4_0:
        _r16_q4_0(out, xq, xd, rw)
    elif kind == Q4_1:
        _r16_q4_1(out, xq, xd, xs, rw)
    elif kind == Q4_K:
        _r16_q4_k(out, xq, xd, xs, rw)
    elif kind == IQ4_XS or kind == IQ4_NL:
        gemm_r16_iq4.qmatmul(out, xq, xd, rw, kind)
    elif kind == Q6_K:
        gemm_r16_q6k.qmatmul(out, xq, xd, rw)
    else:
        _r16_q8_0(out, xq, xd, rw)


@njit(cache=True, nogil=True)
def matmul_f32(out, x, rw, kind):
    """qmatmul_r16 from f32 activations x (T, C), quantized here (quant.quantized): one entry from Python
    where linear.matmul made two, with three arrays fewer to allocate there (~10 us less a call on a
    2048 x 2048 Q4_K matrix, hot, Zen 4). The caller sets the threads and numba's parallel chunk (numba's
    own setter is a ctypes pointer, which a cached kernel cannot hold)."""
    xq, xd, xs = quantized(x)
    qmatmul_r16(out, xq, xd, xs, rw, kind)


# matmul_f32 for one kind each: linear.matmul calls these, so a model compiles the kernels of its own weight
# types only. matmul_f32's switch over every kind compiles all six kernels at its first call (SmolLM2-135M,
# whose only repacked matrix is its Q8_0 output head: ~35 of its ~80 CPU-s of compiling on the Emerald Rapids
# VM). decode_layer calls them too, through a switch over the kinds of each run of layers only
# (decode_layer.kinds_token).


@njit(cache=True, nogil=True)
def f32_q4_0(out, x, rw):
    xq, xd, _ = quantized(x)
    _r16_q4_0(out, xq, xd, rw)


@njit(cache=True, nogil=True)
def f32_q4_1(out, x, rw):
    xq, xd, xs = quantized(x)
    _r16_q4_1(out, xq, xd, xs, rw)


@njit(cache=True, nogil=True)
def f32_q8_0(out, x, rw):
    xq, xd, _ = quantized(x)
    _r16_q8_0(out, xq, xd, rw)


@njit(cache=True, nogil=True)
def f32_q4_k(out, x, rw):
    xq, xd, xs = quantized(x)
    _r16_q4_k(out, xq, xd, xs, rw)


@njit(cache=True, nogil=True)
def f32_q6_k(out, x, rw):
    xq, xd, _ = quantized(x)
    gemm_r16_q6k.qmatmul(out, xq, xd, rw)


@njit(cache=True, nogil=True)
def f32_iq4_nl(out, x, rw):
    xq, xd, _ = quantized(x)
    gemm_r16_iq4._r16_iq4_nl(out, xq, xd, rw)


@njit(cache=True, nogil=True)
def f32_iq4_xs(out, x, rw):
    xq, xd, _ = quantized(x)
    gemm_r16_iq4._r16_iq4_xs(out, xq, xd, rw)


F32_OF_KIND = {Q4_0: f32_q4_0, Q4_1: f32_q4_1, Q8_0: f32_q8_0, Q4_K: f32_q4_k, Q6_K: f32_q6_k, IQ4_NL: f32_iq4_nl,
               IQ4_XS: f32_iq4_xs}  # fmt: skip
"""kind -> out (T, N) = x (T, C) f32 @ W.T for W repacked (rw): matmul_f32(out, x, rw, kind), one kind."""
KERNEL_OF_KIND = MappingProxyType(dict(F32_OF_KIND))
"""F32_OF_KIND as defined here, read-only: the entries numba compiles into the decode layers (decode_layer._chain),
where F32_OF_KIND is looked up at each call of linear.matmul (tests swap its entries for spies)."""
