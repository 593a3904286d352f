"""Q4_0 / Q8_0 matmul on weights repacked at load into groups of 16 interleaved rows (any T).

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
  Q8_0: [16 fp16 scales][8 chunks x 64 bytes: chunk k, lane r = row r's codes 4k..4k+3] (signed;
        the dot takes them as code + 128, so only where cpu.WIDE_DOT_EXACT)
The code offsets (-8, -128) start each block dot at -offset * (the block's activation code sum).
Same numbers as ref_linear.matmul_qact up to float summation order.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from modelc.ir import DataType
from modelc.kernels.qdot import load_f16x16, load_f32x16, prefetch, splat_f32x16, store_f32x16
from modelc.kernels.qdot_r16 import add_i32x16, bcast4_i8x64, flip_i8x64, nib_hi_i8x64, nib_lo_i8x64, splat_i32x16
from modelc.kernels.qdot_tile import WIDE_DOT_EXACT, dot_u8x64, fmadot_f32x16, load_i8x64
from modelc.kernels.quant import KIND

Q4_0, Q8_0 = KIND[DataType.Q4_0], KIND[DataType.Q8_0]
R16_KINDS = frozenset({Q4_0} | ({Q8_0} if WIDE_DOT_EXACT else set()))
"""Kinds repacked and multiplied here (Q8_0's code + 128 needs the exact wide dot: VNNI or portable IR)."""

GROUP = 16
BYTES = {Q4_0: 288, Q8_0: 544}  # one 16-row group of one block
_BLOCK = {Q4_0: 18, Q8_0: 34}  # one row's block in the file
PREFETCH_BYTES = 8192
"""How far ahead of the block being read the kernel prefetches, one line at a time (a group's
blocks are one contiguous stretch; see gemm_fused_k for why software prefetch matters here)."""


def can_repack(dtype: DataType, rows: int, cols: int) -> bool:
    kind = KIND.get(dtype)
    return kind in R16_KINDS and rows % GROUP == 0 and rows > 0 and cols % 32 == 0 and cols > 0


def repack(blocks: np.ndarray, dtype: DataType) -> np.ndarray:
    """(N, C/32 * block bytes) uint8 in file layout -> (N/16, C/32 * BYTES) uint8 interleaved (a new array).

    A numba loop over the groups (the numpy twin, ref_r16.repack, moved ~0.25 GB/s: a 1.1B Q4_0
    model took 3-6 s to load instead of ~1)."""
    kind = KIND[dtype]
    n, row_bytes = blocks.shape
    bs = _BLOCK[kind]
    out = np.empty((n // GROUP, (row_bytes // bs) * BYTES[kind]), np.uint8)
    _repack(np.ascontiguousarray(blocks), out, bs)
    return out


@njit(cache=True, nogil=True, parallel=True)
def _repack(src, out, bs):
    """out (N/16, nb * bb) from src (N, nb * bs): per block, 16 fp16 scales then 4-byte code chunks."""
    nb = src.shape[1] // bs
    chunks = (bs - 2) // 4
    bb = 32 + 64 * chunks
    for gi in prange(out.shape[0]):
        dst = out[gi]
        for r in range(GROUP):
            row = src[gi * GROUP + r]
            for b in range(nb):
                o = b * bb
                p = b * bs
                dst[o + 2 * r] = row[p]
                dst[o + 2 * r + 1] = row[p + 1]
                for k in range(chunks):
                    q = o + 32 + 64 * k + 4 * r
                    for i in range(4):
                        dst[q + i] = row[p + 2 + 4 * k + i]


@njit(cache=True, nogil=True, inline="always")
def _group(out, xq, sa, xd, rf, gi, nb, kind, t, c, acc):
    """Rows 16 gi .. 16 gi + 15 for all t tokens (acc: (t * 16,) f32 scratch)."""
    bb = 288 if kind == 0 else 544
    acc[:] = 0.0
    base = gi * nb * bb
    pf = base + PREFETCH_BYTES
    for b in range(nb):
        o = base + b * bb
        ahead = o + bb + PREFETCH_BYTES
        while pf < ahead:
            prefetch(rf, pf)
            pf += 64
        d = load_f16x16(rf, o)
        if kind == 0:
            q0 = load_i8x64(rf, o + 32)
            q1 = load_i8x64(rf, o + 96)
            q2 = load_i8x64(rf, o + 160)
            q3 = load_i8x64(rf, o + 224)
            l0, h0 = nib_lo_i8x64(q0), nib_hi_i8x64(q0)
            l1, h1 = nib_lo_i8x64(q1), nib_hi_i8x64(q1)
            l2, h2 = nib_lo_i8x64(q2), nib_hi_i8x64(q2)
            l3, h3 = nib_lo_i8x64(q3), nib_hi_i8x64(q3)
            for j in range(t):
                xo = j * c + b * 32
                p = splat_i32x16(sa[j, b])
                p = dot_u8x64(p, l0, bcast4_i8x64(xq, xo))
                p = dot_u8x64(p, l1, bcast4_i8x64(xq, xo + 4))
                p = dot_u8x64(p, l2, bcast4_i8x64(xq, xo + 8))
                p = dot_u8x64(p, l3, bcast4_i8x64(xq, xo + 12))
                p2 = dot_u8x64(splat_i32x16(0), h0, bcast4_i8x64(xq, xo + 16))
                p2 = dot_u8x64(p2, h1, bcast4_i8x64(xq, xo + 20))
                p2 = dot_u8x64(p2, h2, bcast4_i8x64(xq, xo + 24))
                p2 = dot_u8x64(p2, h3, bcast4_i8x64(xq, xo + 28))
                a = fmadot_f32x16(load_f32x16(acc, j * 16), add_i32x16(p, p2), d, splat_f32x16(xd[j, b]))
                store_f32x16(acc, j * 16, a)
        else:
            u0 = flip_i8x64(load_i8x64(rf, o + 32))
            u1 = flip_i8x64(load_i8x64(rf, o + 96))
            u2 = flip_i8x64(load_i8x64(rf, o + 160))
            u3 = flip_i8x64(load_i8x64(rf, o + 224))
            u4 = flip_i8x64(load_i8x64(rf, o + 288))
            u5 = flip_i8x64(load_i8x64(rf, o + 352))
            u6 = flip_i8x64(load_i8x64(rf, o + 416))
            u7 = flip_i8x64(load_i8x64(rf, o + 480))
            for j in range(t):
                xo = j * c + b * 32
                p = splat_i32x16(sa[j, b])
                p = dot_u8x64(p, u0, bcast4_i8x64(xq, xo))
                p = dot_u8x64(p, u1, bcast4_i8x64(xq, xo + 4))
                p = dot_u8x64(p, u2, bcast4_i8x64(xq, xo + 8))
                p = dot_u8x64(p, u3, bcast4_i8x64(xq, xo + 12))
                p2 = dot_u8x64(splat_i32x16(0), u4, bcast4_i8x64(xq, xo + 16))
                p2 = dot_u8x64(p2, u5, bcast4_i8x64(xq, xo + 20))
                p2 = dot_u8x64(p2, u6, bcast4_i8x64(xq, xo + 24))
                p2 = dot_u8x64(p2, u7, bcast4_i8x64(xq, xo + 28))
                a = fmadot_f32x16(load_f32x16(acc, j * 16), add_i32x16(p, p2), d, splat_f32x16(xd[j, b]))
                store_f32x16(acc, j * 16, a)
    r0 = gi * 16
    for j in range(t):
        for r in range(16):
            out[j, r0 + r] = acc[j * 16 + r]


@njit(cache=True, nogil=True)
def _offsets(xq, nb, off):
    """(T, nb) int32: -off * the sum of each 32-element block's activation codes."""
    t = xq.shape[0]
    sa = np.empty((t, nb), np.int32)
    for j in range(t):
        for b in range(nb):
            s = 0
            for i in range(32):
                s += np.int32(xq[j, b * 32 + i])
            sa[j, b] = -off * s
    return sa


@njit(cache=True, nogil=True, parallel=True)
def _r16_q4_0(out, xq, xd, rw):
    t, c = xq.shape
    nb = c // 32
    sa = _offsets(xq, nb, 8)
    xqf = xq.reshape(-1)
    rf = rw.reshape(-1)
    for gi in prange(rw.shape[0]):
        acc = np.empty(t * 16, np.float32)
        _group(out, xqf, sa, xd, rf, gi, nb, 0, t, c, acc)


@njit(cache=True, nogil=True, parallel=True)
def _r16_q8_0(out, xq, xd, rw):
    t, c = xq.shape
    nb = c // 32
    sa = _offsets(xq, nb, 128)
    xqf = xq.reshape(-1)
    rf = rw.reshape(-1)
    for gi in prange(rw.shape[0]):
        acc = np.empty(t * 16, np.float32)
        _group(out, xqf, sa, xd, rf, gi, nb, 4, t, c, acc)


def qmatmul_r16(out: np.ndarray, xq: np.ndarray, xd: np.ndarray, rw: np.ndarray, kind: int) -> None:
    """out (T, N) f32 = dequant(W) @ x.T, W repacked by `repack` (rw (N/16, C/32 * BYTES) uint8).

    xq (T, C) int8, xd (T, C/32) f32 from quant.quantize_act; every row of out is written.
    parallel=True over 16-row groups; the caller sets the thread count.
    """
    if kind == Q4_0:
        _r16_q4_0(out, xq, xd, rw)
    else:
        _r16_q8_0(out, xq, xd, rw)
