"""Register-tiled small GEMM (T = 2..31) for Q4_0, Q8_0, Q4_K and Q6_K weights, int8 activations.

NOTE: the decode step of a batch is bound by how often each weight block is
unpacked and how many vector ops each (row, token) pair costs. Here a tile of
4 weight rows x 4 (or 2) tokens keeps 16 (or 8) F32x16 accumulators in
registers; each 64-element group of a weight row is unpacked ONCE per tile
straight from the stored bytes (qdot_tile, no L1 unpack pass) and used for
every token of the tile, and each activation group is loaded once for the 4
rows. A (row, token) pair costs one vpdpbusd, one convert, one mul and one fma
per 64 elements. Codes are unsigned; a type's offset is folded in without float
work: Q4_0 (code - 8) and Q8_0 (code + 128 - 128) start the integer dot at
-offset * (lane sum of the activation codes), precomputed per call in `ini`;
Q4_K's mins and Q6_K's -32 are one fma per 256 elements with the per-16
activation sums xs. Same numbers as gemm_int up to float summation order; the
numpy twin is ref_linear.matmul_qact.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange
from numba.extending import overload

from modelc.ir import DataType
from modelc.kernels.matmul.gemm_tile_parts import kcodes, kscales, pair, row_bases, write
from modelc.kernels.quant.quant import KIND
from modelc.kernels.simd.qdot import fma_f32x16, load_f32x16, zeros_f32x16
from modelc.kernels.simd.qdot_tile import (
    WIDE_DOT_EXACT,
    dot_u8x64,
    fmadot_f32x16,
    lanesum_i8x64,
    load_i8x64,
    load_i32x16,
    pair_f32x16,
    store_f32x16,
    store_i32x16,
    zeros_i32x16,
)

Q4_0, Q8_0, Q4_K, Q6_K = KIND[DataType.Q4_0], KIND[DataType.Q8_0], KIND[DataType.Q4_K], KIND[DataType.Q6_K]
TILE_KINDS = frozenset({Q4_0, Q4_K, Q6_K} | ({Q8_0} if WIDE_DOT_EXACT else set()))
"""Kinds this module multiplies (Q8_0's 0..255 codes need an exact wide dot: VNNI or portable IR)."""

OFFSET = {Q4_0: 8, Q8_0: 128, Q4_K: 0, Q6_K: 0}
"""Integer offset folded into the dot's start value (ini) per kind; K-quants fold theirs in float."""

ROWS = 4  # weight rows per tile
CHUNK_ROWS = 16  # weight rows per prange iteration


@njit(cache=True, nogil=True)
def prep_act(ini, dxl, xq, xd, off):
    """Per 64-element group of each activation row: the dot's start value and the lane scales.

    xq (T, Cp) int8 with Cp % 64 == 0 (zero-padded past C); xd (T, C/32) f32;
    ini (T, Cp/4) i32 = -off * (sum of the 4 codes of each lane), written only if off != 0;
    dxl (T, Cp/4) f32 = xd of the block each lane belongs to (0 past C).
    """
    t, cp = xq.shape
    nb = xd.shape[1]
    ng = cp // 64
    xqf = xq.reshape(-1)
    inf = ini.reshape(-1)
    dxf = dxl.reshape(-1)
    for i in range(t):
        for g in range(ng):
            o = (i * ng + g) * 16
            if off != 0:
                store_i32x16(inf, o, lanesum_i8x64(xqf, i * cp + g * 64, -off))
            d1 = xd[i, 2 * g + 1] if 2 * g + 1 < nb else np.float32(0.0)
            store_f32x16(dxf, o, pair_f32x16(xd[i, 2 * g], d1))


# ---- the register tile: 4 weight rows x NT tokens, accumulators as tuples of F32x16 ------
# A, X, I: per-token tuples of activation codes (I8x64), lane scales (F32x16) and dot start
# values (I32x16) of one 64-element group; c: one row's per-token accumulators.


def _upd(c, u, s, a, x, i):
    """c[j] + float(dot(i[j], u, a[j])) * s * x[j] for each token j (numba only)."""
    raise NotImplementedError


def _fmins(c, m, y):
    """c[j] + m * y[j]: a K-quant super-block's min/offset term (per-16 activation sums y)."""
    raise NotImplementedError


def _load_tok(xqf, dxf, ts, cp, g):
    """Group g of each token in ts: (codes, lane scales)."""
    raise NotImplementedError


def _load_ini(inf, ts, cp, g):
    """Group g's dot start values of each token in ts."""
    raise NotImplementedError


def _load_xs(xsf, ts, cp, b):
    """Super-block b's 16 per-16 activation sums of each token in ts."""
    raise NotImplementedError


def _zeros(ts):
    raise NotImplementedError


def _zeros_i(ts):
    raise NotImplementedError


# NOTE: the tile code is written once for 4 and for 2 tokens; these overloads pick the
# unrolled body by the tuple's length at compile time, so every value stays in registers.


@overload(_upd, inline="always")
def _upd_ov(c, u, s, a, x, i):
    if len(c) == 4:

        def impl4(c, u, s, a, x, i):
            return (
                fmadot_f32x16(c[0], dot_u8x64(i[0], u, a[0]), s, x[0]),
                fmadot_f32x16(c[1], dot_u8x64(i[1], u, a[1]), s, x[1]),
                fmadot_f32x16(c[2], dot_u8x64(i[2], u, a[2]), s, x[2]),
                fmadot_f32x16(c[3], dot_u8x64(i[3], u, a[3]), s, x[3]),
            )

        return impl4

    def impl2(c, u, s, a, x, i):
        return (
            fmadot_f32x16(c[0], dot_u8x64(i[0], u, a[0]), s, x[0]),
            fmadot_f32x16(c[1], dot_u8x64(i[1], u, a[1]), s, x[1]),
        )

    return impl2


@overload(_fmins, inline="always")
def _fmins_ov(c, m, y):
    if len(c) == 4:

        def impl4(c, m, y):
            return (
                fma_f32x16(c[0], m, y[0]),
                fma_f32x16(c[1], m, y[1]),
                fma_f32x16(c[2], m, y[2]),
                fma_f32x16(c[3], m, y[3]),
            )

        return impl4

    def impl2(c, m, y):
        return fma_f32x16(c[0], m, y[0]), fma_f32x16(c[1], m, y[1])

    return impl2


@overload(_load_tok, inline="always")
def _load_tok_ov(xqf, dxf, ts, cp, g):
    if len(ts) == 4:

        def impl4(xqf, dxf, ts, cp, g):
            q = cp // 4
            a = (
                load_i8x64(xqf, ts[0] * cp + g * 64),
                load_i8x64(xqf, ts[1] * cp + g * 64),
                load_i8x64(xqf, ts[2] * cp + g * 64),
                load_i8x64(xqf, ts[3] * cp + g * 64),
            )
            x = (
                load_f32x16(dxf, ts[0] * q + g * 16),
                load_f32x16(dxf, ts[1] * q + g * 16),
                load_f32x16(dxf, ts[2] * q + g * 16),
                load_f32x16(dxf, ts[3] * q + g * 16),
            )
            return a, x

        return impl4

    def impl2(xqf, dxf, ts, cp, g):
        q = cp // 4
        a = (load_i8x64(xqf, ts[0] * cp + g * 64), load_i8x64(xqf, ts[1] * cp + g * 64))
        x = (load_f32x16(dxf, ts[0] * q + g * 16), load_f32x16(dxf, ts[1] * q + g * 16))
        return a, x

    return impl2


@overload(_load_ini, inline="always")
def _load_ini_ov(inf, ts, cp, g):
    if len(ts) == 4:

        def impl4(inf, ts, cp, g):
            q = cp // 4
            return (
                load_i32x16(inf, ts[0] * q + g * 16),
                load_i32x16(inf, ts[1] * q + g * 16),
                load_i32x16(inf, ts[2] * q + g * 16),
                load_i32x16(inf, ts[3] * q + g * 16),
            )

        return impl4

    def impl2(inf, ts, cp, g):
        q = cp // 4
        return load_i32x16(inf, ts[0] * q + g * 16), load_i32x16(inf, ts[1] * q + g * 16)

    return impl2


@overload(_load_xs, inline="always")
def _load_xs_ov(xsf, ts, cp, b):
    if len(ts) == 4:

        def impl4(xsf, ts, cp, b):
            n = cp // 16
            return (
                load_f32x16(xsf, ts[0] * n + b * 16),
                load_f32x16(xsf, ts[1] * n + b * 16),
                load_f32x16(xsf, ts[2] * n + b * 16),
                load_f32x16(xsf, ts[3] * n + b * 16),
            )

        return impl4

    def impl2(xsf, ts, cp, b):
        n = cp // 16
        return load_f32x16(xsf, ts[0] * n + b * 16), load_f32x16(xsf, ts[1] * n + b * 16)

    return impl2


@overload(_zeros, inline="always")
def _zeros_ov(ts):
    if len(ts) == 4:

        def impl4(ts):
            z = zeros_f32x16()
            return z, z, z, z

        return impl4

    def impl2(ts):
        z = zeros_f32x16()
        return z, z

    return impl2


@overload(_zeros_i, inline="always")
def _zeros_i_ov(ts):
    if len(ts) == 4:

        def impl4(ts):
            z = zeros_i32x16()
            return z, z, z, z

        return impl4

    def impl2(ts):
        z = zeros_i32x16()
        return z, z

    return impl2


@njit(cache=True, nogil=True, inline="always")
def _tile_pairs(out, wf, r, n, nbytes, kind, bsize, nb, xqf, inf, dxf, cp, ts):
    """Q4_0 / Q8_0 rows r..r+3 x tokens ts: 64-element groups of two 32-blocks; an odd last
    block pairs with itself (the activations past C are zero, so the copy adds nothing)."""
    b0, b1, b2, b3 = row_bases(r, n, nbytes)
    c0, c1, c2, c3 = _zeros(ts), _zeros(ts), _zeros(ts), _zeros(ts)
    for g in range(cp // 64):
        a, x = _load_tok(xqf, dxf, ts, cp, g)
        i = _load_ini(inf, ts, cp, g)
        o0 = 2 * g * bsize
        o1 = o0 + bsize if 2 * g + 1 < nb else o0
        u, s = pair(kind, wf, b0 + o0, b0 + o1)
        c0 = _upd(c0, u, s, a, x, i)
        u, s = pair(kind, wf, b1 + o0, b1 + o1)
        c1 = _upd(c1, u, s, a, x, i)
        u, s = pair(kind, wf, b2 + o0, b2 + o1)
        c2 = _upd(c2, u, s, a, x, i)
        u, s = pair(kind, wf, b3 + o0, b3 + o1)
        c3 = _upd(c3, u, s, a, x, i)
    write(out, r, n, ts, c0)
    write(out, r + 1, n, ts, c1)
    write(out, r + 2, n, ts, c2)
    write(out, r + 3, n, ts, c3)


@njit(cache=True, nogil=True, inline="always")
def _tile_k(out, wf, r, n, nbytes, kind, sbsize, xqf, xsf, dxf, cp, ts):
    """Q4_K / Q6_K rows r..r+3 x tokens ts: per 256-element super-block, the min (offset) term
    once, then four 64-element groups."""
    b0, b1, b2, b3 = row_bases(r, n, nbytes)
    c0, c1, c2, c3 = _zeros(ts), _zeros(ts), _zeros(ts), _zeros(ts)
    i = _zeros_i(ts)
    for b in range(cp // 256):
        o0, o1, o2, o3 = b0 + b * sbsize, b1 + b * sbsize, b2 + b * sbsize, b3 + b * sbsize
        s0 = kscales(kind, wf, o0)
        s1 = kscales(kind, wf, o1)
        s2 = kscales(kind, wf, o2)
        s3 = kscales(kind, wf, o3)
        y = _load_xs(xsf, ts, cp, b)
        c0 = _fmins(c0, s0[4], y)
        c1 = _fmins(c1, s1[4], y)
        c2 = _fmins(c2, s2[4], y)
        c3 = _fmins(c3, s3[4], y)
        g = b * 4
        u0, u1, u2, u3 = (
            kcodes(kind, wf, o0, 0),
            kcodes(kind, wf, o1, 0),
            kcodes(kind, wf, o2, 0),
            kcodes(kind, wf, o3, 0),
        )
        a, x = _load_tok(xqf, dxf, ts, cp, g)
        c0, c1 = _upd(c0, u0[0], s0[0], a, x, i), _upd(c1, u1[0], s1[0], a, x, i)
        c2, c3 = _upd(c2, u2[0], s2[0], a, x, i), _upd(c3, u3[0], s3[0], a, x, i)
        a, x = _load_tok(xqf, dxf, ts, cp, g + 1)
        c0, c1 = _upd(c0, u0[1], s0[1], a, x, i), _upd(c1, u1[1], s1[1], a, x, i)
        c2, c3 = _upd(c2, u2[1], s2[1], a, x, i), _upd(c3, u3[1], s3[1], a, x, i)
        u0, u1, u2, u3 = (
            kcodes(kind, wf, o0, 1),
            kcodes(kind, wf, o1, 1),
            kcodes(kind, wf, o2, 1),
            kcodes(kind, wf, o3, 1),
        )
        a, x = _load_tok(xqf, dxf, ts, cp, g + 2)
        c0, c1 = _upd(c0, u0[0], s0[2], a, x, i), _upd(c1, u1[0], s1[2], a, x, i)
        c2, c3 = _upd(c2, u2[0], s2[2], a, x, i), _upd(c3, u3[0], s3[2], a, x, i)
        a, x = _load_tok(xqf, dxf, ts, cp, g + 3)
        c0, c1 = _upd(c0, u0[1], s0[3], a, x, i), _upd(c1, u1[1], s1[3], a, x, i)
        c2, c3 = _upd(c2, u2[1], s2[3], a, x, i), _upd(c3, u3[1], s3[3], a, x, i)
    write(out, r, n, ts, c0)
    write(out, r + 1, n, ts, c1)
    write(out, r + 2, n, ts, c2)
    write(out, r + 3, n, ts, c3)


# NOTE: one tile function, chunk function and parallel entry per type, with the type a
# constant in each: LLVM drops the other types' code, and only the types a model uses
# get compiled. The tile functions are real calls (numba inlining the big tile bodies
# into every caller took minutes to compile; a call per 4-row tile costs nothing), and
# so is the chunk: numba's parfor analysis of a prange body cannot follow the tile's
# tuples of vectors.


@njit(cache=True, nogil=True)
def _tile_q4_0(out, wf, r, n, nbytes, nb, xqf, xsf, inf, dxf, cp, ts):
    _tile_pairs(out, wf, r, n, nbytes, 0, 18, nb, xqf, inf, dxf, cp, ts)


@njit(cache=True, nogil=True)
def _tile_q8_0(out, wf, r, n, nbytes, nb, xqf, xsf, inf, dxf, cp, ts):
    _tile_pairs(out, wf, r, n, nbytes, 4, 34, nb, xqf, inf, dxf, cp, ts)


@njit(cache=True, nogil=True)
def _tile_q4_k(out, wf, r, n, nbytes, nb, xqf, xsf, inf, dxf, cp, ts):
    _tile_k(out, wf, r, n, nbytes, 7, 144, xqf, xsf, dxf, cp, ts)


@njit(cache=True, nogil=True)
def _tile_q6_k(out, wf, r, n, nbytes, nb, xqf, xsf, inf, dxf, cp, ts):
    _tile_k(out, wf, r, n, nbytes, 9, 210, xqf, xsf, dxf, cp, ts)


@njit(cache=True, nogil=True, inline="always")
def _rows(tile, out, wf, r0, r1, n, nbytes, nb, xqf, xsf, inf, dxf, t, cp):
    """Rows r0..r1 x all tokens, in tiles of 4 rows x 4 (then 2) tokens.

    (A 2-row x 8-token tile, one unpack per 8 pairs, measured 4-7% slower: the
    vector ALU, not the unpacking, is the limit.)
    """
    for r in range(r0, r1, ROWS):
        j = 0
        while j + 4 <= t:
            tile(out, wf, r, n, nbytes, nb, xqf, xsf, inf, dxf, cp, (j, j + 1, j + 2, j + 3))
            j += 4
        if j + 2 <= t:
            tile(out, wf, r, n, nbytes, nb, xqf, xsf, inf, dxf, cp, (j, j + 1))
            j += 2
        if j < t:  # one token left: a 2-token tile with the token twice
            tile(out, wf, r, n, nbytes, nb, xqf, xsf, inf, dxf, cp, (j, j))


@njit(cache=True, nogil=True)
def _chunk_q4_0(out, wf, r0, r1, n, nbytes, nb, xqf, xsf, inf, dxf, t, cp):
    _rows(_tile_q4_0, out, wf, r0, r1, n, nbytes, nb, xqf, xsf, inf, dxf, t, cp)


@njit(cache=True, nogil=True)
def _chunk_q8_0(out, wf, r0, r1, n, nbytes, nb, xqf, xsf, inf, dxf, t, cp):
    _rows(_tile_q8_0, out, wf, r0, r1, n, nbytes, nb, xqf, xsf, inf, dxf, t, cp)


@njit(cache=True, nogil=True)
def _chunk_q4_k(out, wf, r0, r1, n, nbytes, nb, xqf, xsf, inf, dxf, t, cp):
    _rows(_tile_q4_k, out, wf, r0, r1, n, nbytes, nb, xqf, xsf, inf, dxf, t, cp)


@njit(cache=True, nogil=True)
def _chunk_q6_k(out, wf, r0, r1, n, nbytes, nb, xqf, xsf, inf, dxf, t, cp):
    _rows(_tile_q6_k, out, wf, r0, r1, n, nbytes, nb, xqf, xsf, inf, dxf, t, cp)


@njit(cache=True, nogil=True, parallel=True)
def tile_q4_0(out, xq, xs, ini, dxl, w, nb):
    """out (T, N) f32 = dequant(w) @ x.T for Q4_0 w, in int8-activation form.

    parallel=True: chunks of CHUNK_ROWS weight rows are independent; the caller sets
    the thread count. xq (T, Cp) int8 with Cp = C rounded up to 64 (zero past C);
    xs (T, Cp/16) f32 (quant.quantize_act's per-16 sums; read by the K-quants only);
    ini, dxl (T, Cp/4) from prep_act; w (N, row_bytes) uint8 C-contig; nb = C / 32.
    out written fully. tile_q8_0, tile_q4_k, tile_q6_k: the same for their types.
    """
    t, cp = xq.shape
    n, nbytes = w.shape
    wf, xqf, xsf, inf, dxf = w.reshape(-1), xq.reshape(-1), xs.reshape(-1), ini.reshape(-1), dxl.reshape(-1)
    for ch in prange((n + CHUNK_ROWS - 1) // CHUNK_ROWS):
        r0 = ch * CHUNK_ROWS
        _chunk_q4_0(out, wf, r0, min(n, r0 + CHUNK_ROWS), n, nbytes, nb, xqf, xsf, inf, dxf, t, cp)


@njit(cache=True, nogil=True, parallel=True)
def tile_q8_0(out, xq, xs, ini, dxl, w, nb):
    t, cp = xq.shape
    n, nbytes = w.shape
    wf, xqf, xsf, inf, dxf = w.reshape(-1), xq.reshape(-1), xs.reshape(-1), ini.reshape(-1), dxl.reshape(-1)
    for ch in prange((n + CHUNK_ROWS - 1) // CHUNK_ROWS):
        r0 = ch * CHUNK_ROWS
        _chunk_q8_0(out, wf, r0, min(n, r0 + CHUNK_ROWS), n, nbytes, nb, xqf, xsf, inf, dxf, t, cp)


@njit(cache=True, nogil=True, parallel=True)
def tile_q4_k(out, xq, xs, ini, dxl, w, nb):
    t, cp = xq.shape
    n, nbytes = w.shape
    wf, xqf, xsf, inf, dxf = w.reshape(-1), xq.reshape(-1), xs.reshape(-1), ini.reshape(-1), dxl.reshape(-1)
    for ch in prange((n + CHUNK_ROWS - 1) // CHUNK_ROWS):
        r0 = ch * CHUNK_ROWS
        _chunk_q4_k(out, wf, r0, min(n, r0 + CHUNK_ROWS), n, nbytes, nb, xqf, xsf, inf, dxf, t, cp)


@njit(cache=True, nogil=True, parallel=True)
def tile_q6_k(out, xq, xs, ini, dxl, w, nb):
    t, cp = xq.shape
    n, nbytes = w.shape
    wf, xqf, xsf, inf, dxf = w.reshape(-1), xq.reshape(-1), xs.reshape(-1), ini.reshape(-1), dxl.reshape(-1)
    for ch in prange((n + CHUNK_ROWS - 1) // CHUNK_ROWS):
        r0 = ch * CHUNK_ROWS
        _chunk_q6_k(out, wf, r0, min(n, r0 + CHUNK_ROWS), n, nbytes, nb, xqf, xsf, inf, dxf, t, cp)


_ENTRY = {Q4_0: tile_q4_0, Q8_0: tile_q8_0, Q4_K: tile_q4_k, Q6_K: tile_q6_k}


def qmatmul_tile(out: np.ndarray, xq: np.ndarray, xd: np.ndarray, xs: np.ndarray, w: np.ndarray, kind: int) -> None:
    """out (T, N) f32 = dequant(w) @ x.T for kind in TILE_KINDS; gemm_int.qmatmul's contract.

    xq (T, C) int8, xd (T, C/32), xs (T, C/16) f32 from quant.quantize_act; w (N, row_bytes)
    uint8 C-contig. Pads the activations to a multiple of 64 columns when C is not one.
    """
    t, c = xq.shape
    cp = (c + 63) // 64 * 64
    if cp != c:
        xqp = np.zeros((t, cp), np.int8)  # (T, Cp)
        xqp[:, :c] = xq
        xq = xqp
    ini = np.empty((t, cp // 4) if OFFSET[kind] else (1, 16), np.int32)  # (T, Cp/4)
    dxl = np.empty((t, cp // 4), np.float32)  # (T, Cp/4)
    prep_act(ini, dxl, xq, xd, OFFSET[kind])
    _ENTRY[kind](out, xq, xs, ini, dxl, w, c // 32)
