"""Single-token (T=1) matvec for the commonest types, unpacking each block in registers.

At T=1 nothing amortizes gemm_int's unpack-to-L1 pass, so these kernels read
Q4_0 / Q8_0 blocks straight from the stored bytes and feed the int8 dot (qdot)
directly (the K-quants: gemm_fused_k). Same numbers as gemm_int up to float summation order; the
numpy twin is ref_linear.matmul_qact.

Q4_0 and Q8_0 on AVX-512 (cpu.HAS_AVX512): the activation row is first laid out
once per call (`_act_q4_0`, `_act_q8_0`) in the order the 512-bit intrinsics
consume it, with the weights' code offset (Q4_0: nibble - 8; Q8_0: the w + 128 that
vpdpbusd's unsigned operand needs) folded in as exact int32 corrections, so each
group of 4 Q4_0 (2 Q8_0) blocks is one qdot.q4_0x4_fma (q8_0x2_fma) and the loop
has no scalar work. Elsewhere the 8-lane rows below do one block at a time. Both
prefetch PREFETCH_BYTES ahead in the weight stream: a T=1 matvec is bound by
memory latency, and the hardware prefetcher alone left half the bandwidth unused.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from modelc.ir import DataType
from modelc.kernels.quant.quant import KIND
from modelc.kernels.runtime.cpu import HAS_AVX512
from modelc.kernels.simd.qdot import (
    Q4_0X4_ACT_BYTES,
    Q8_0X2_ACT_BYTES,
    add_f32x16,
    dot_i8x32,
    dotu_i8x32,
    f16_at,
    fma_i32x8,
    hsum_f32x8,
    hsum_f32x16,
    load_i8x32,
    nib16_i8x32,
    prefetch,
    q4_0x4_fma,
    q8_0x2_fma,
    splat_f32x8,
    zeros_f32x8,
    zeros_f32x16,
)

FUSED_KINDS = frozenset({KIND[DataType.Q4_0], KIND[DataType.Q8_0]})
"""The K-quants' T=1 matvec is gemm_fused_k.qmatvec_k."""

PREFETCH_BYTES = 4096
"""How far ahead of the bytes being dotted the Q4_0/Q8_0 rows prefetch (the next rows
once a row's end is near). Measured on the dev VM (TinyLlama Q4_0, 2 threads, all
matrices, busy VM): 1024: 0.74x, 2048: 0.87x, 4096: 1x, 8192: 0.99x; none: 0.75x."""


@njit(cache=True, nogil=True)
def _aligned_i8(nbytes):
    """(nbytes,) int8 starting on a 64-byte boundary: 512-bit loads that never split a cache line
    (1.15x on the hot Q4_0/Q8_0 loop, dev VM)."""
    buf = np.empty(nbytes + 64, np.int8)  # (nbytes + 64,)
    off = (-buf.ctypes.data) % 64
    return buf[off : off + nbytes]


@njit(cache=True, nogil=True)
def _act_q4_0(xq, xd, ng):
    """xa (ng * 256,) int8: the first 4 * ng blocks of xq (C,) int8 / xd (C/32,) f32 in q4_0x4_fma's layout."""
    xa = _aligned_i8(ng * Q4_0X4_ACT_BYTES)  # (C/128 * 256,)
    xi = xa.view(np.int32)
    xf = xa.view(np.float32)
    for g in range(ng):
        o = g * Q4_0X4_ACT_BYTES
        for j in range(4):
            b = 4 * g + j
            for i in range(16):
                xa[o + 16 * j + i] = xq[32 * b + i]
                xa[o + 64 + 16 * j + i] = xq[32 * b + 16 + i]
            for k in range(4):
                s = 0
                for i in range(4):
                    s += np.int32(xq[32 * b + 4 * k + i]) + np.int32(xq[32 * b + 16 + 4 * k + i])
                xi[o // 4 + 32 + 4 * j + k] = -8 * s
                xf[o // 4 + 48 + 4 * j + k] = xd[b]
    return xa


@njit(cache=True, nogil=True)
def _act_q8_0(xq, xd, ng):
    """xa (ng * 192,) int8: the first 2 * ng blocks of xq (C,) int8 / xd (C/32,) f32 in q8_0x2_fma's layout."""
    xa = _aligned_i8(ng * Q8_0X2_ACT_BYTES)  # (C/64 * 192,)
    xi = xa.view(np.int32)
    xf = xa.view(np.float32)
    for g in range(ng):
        o = g * Q8_0X2_ACT_BYTES
        for i in range(64):
            xa[o + i] = xq[64 * g + i]
        for k in range(16):
            s = 0
            for i in range(4):
                s += np.int32(xq[64 * g + 4 * k + i])
            xi[o // 4 + 16 + k] = -128 * s
            xf[o // 4 + 32 + k] = xd[2 * g + k // 8]
    return xa


@njit(cache=True, nogil=True, inline="always")
def _row_q4_0(w, base, xq, xd, xs, b0, nb):
    """Blocks b0..nb-1 of the Q4_0 row at byte base, one block (8 lanes) at a time."""
    acc0 = zeros_f32x8()
    acc1 = zeros_f32x8()
    m = np.float32(0.0)
    for b in range(b0, nb - 1, 2):
        o = base + b * 18
        prefetch(w, o + PREFETCH_BYTES)
        d0 = f16_at(w, o)
        d1 = f16_at(w, o + 18)
        p0 = dotu_i8x32(nib16_i8x32(w, o + 2), load_i8x32(xq, b * 32))
        p1 = dotu_i8x32(nib16_i8x32(w, o + 20), load_i8x32(xq, b * 32 + 32))
        acc0 = fma_i32x8(acc0, p0, splat_f32x8(d0 * xd[b]))
        acc1 = fma_i32x8(acc1, p1, splat_f32x8(d1 * xd[b + 1]))
        m += d0 * (xs[2 * b] + xs[2 * b + 1]) + d1 * (xs[2 * b + 2] + xs[2 * b + 3])
    if (nb - b0) % 2:
        b = nb - 1
        o = base + b * 18
        d0 = f16_at(w, o)
        p0 = dotu_i8x32(nib16_i8x32(w, o + 2), load_i8x32(xq, b * 32))
        acc0 = fma_i32x8(acc0, p0, splat_f32x8(d0 * xd[b]))
        m += d0 * (xs[2 * b] + xs[2 * b + 1])
    return hsum_f32x8(acc0) + hsum_f32x8(acc1) - np.float32(8.0) * m


@njit(cache=True, nogil=True, inline="always")
def _row_q8_0(w, base, xq, xd, b0, nb):
    """Blocks b0..nb-1 of the Q8_0 row at byte base, one block (8 lanes) at a time."""
    acc0 = zeros_f32x8()
    acc1 = zeros_f32x8()
    for b in range(b0, nb - 1, 2):
        o = base + b * 34
        prefetch(w, o + PREFETCH_BYTES)
        p0 = dot_i8x32(load_i8x32(w, o + 2), load_i8x32(xq, b * 32))
        p1 = dot_i8x32(load_i8x32(w, o + 36), load_i8x32(xq, b * 32 + 32))
        acc0 = fma_i32x8(acc0, p0, splat_f32x8(f16_at(w, o) * xd[b]))
        acc1 = fma_i32x8(acc1, p1, splat_f32x8(f16_at(w, o + 34) * xd[b + 1]))
    if (nb - b0) % 2:
        b = nb - 1
        o = base + b * 34
        p0 = dot_i8x32(load_i8x32(w, o + 2), load_i8x32(xq, b * 32))
        acc0 = fma_i32x8(acc0, p0, splat_f32x8(f16_at(w, o) * xd[b]))
    return hsum_f32x8(acc0) + hsum_f32x8(acc1)


@njit(cache=True, nogil=True, inline="always")
def _row_q4_0x4(w, base, xa, ng):
    """Groups 0..ng-1 (4 blocks each) of the Q4_0 row at byte base, xa from _act_q4_0."""
    acc0 = zeros_f32x16()
    acc1 = zeros_f32x16()
    for g in range(0, ng - 1, 2):
        o = base + g * 72
        prefetch(w, o + PREFETCH_BYTES)
        prefetch(w, o + PREFETCH_BYTES + 64)
        prefetch(w, o + PREFETCH_BYTES + 128)
        acc0 = q4_0x4_fma(acc0, w, o, xa, g * Q4_0X4_ACT_BYTES)
        acc1 = q4_0x4_fma(acc1, w, o + 72, xa, (g + 1) * Q4_0X4_ACT_BYTES)
    if ng % 2:
        acc0 = q4_0x4_fma(acc0, w, base + (ng - 1) * 72, xa, (ng - 1) * Q4_0X4_ACT_BYTES)
    return hsum_f32x16(add_f32x16(acc0, acc1))


@njit(cache=True, nogil=True, inline="always")
def _row_q8_0x2(w, base, xa, ng):
    """Groups 0..ng-1 (2 blocks each) of the Q8_0 row at byte base, xa from _act_q8_0."""
    acc0 = zeros_f32x16()
    acc1 = zeros_f32x16()
    for g in range(0, ng - 1, 2):
        o = base + g * 68
        prefetch(w, o + PREFETCH_BYTES)
        prefetch(w, o + PREFETCH_BYTES + 64)
        prefetch(w, o + PREFETCH_BYTES + 128)
        acc0 = q8_0x2_fma(acc0, w, o, xa, g * Q8_0X2_ACT_BYTES)
        acc1 = q8_0x2_fma(acc1, w, o + 68, xa, (g + 1) * Q8_0X2_ACT_BYTES)
    if ng % 2:
        acc0 = q8_0x2_fma(acc0, w, base + (ng - 1) * 68, xa, (ng - 1) * Q8_0X2_ACT_BYTES)
    return hsum_f32x16(add_f32x16(acc0, acc1))


@njit(cache=True, nogil=True, parallel=True)
def _matvec_q4_0x4(out, wf, nbytes, xa, ng):
    """out[0, r] = groups 0..ng-1 of each Q4_0 row (AVX-512), xa from _act_q4_0.

    Functions of their own, with no other row code beside the loop: next to the 8-lane
    rows LLVM reloaded the permute and mask constants on every iteration (0.93x hot).
    """
    n = out.shape[1]
    nchunk = max(1, min(n, n // 16))
    for ch in prange(nchunk):
        for r in range(ch * n // nchunk, (ch + 1) * n // nchunk):
            out[0, r] = _row_q4_0x4(wf, r * nbytes, xa, ng)


@njit(cache=True, nogil=True, parallel=True)
def _matvec_q8_0x2(out, wf, nbytes, xa, ng):
    """out[0, r] = groups 0..ng-1 of each Q8_0 row (AVX-512), xa from _act_q8_0."""
    n = out.shape[1]
    nchunk = max(1, min(n, n // 16))
    for ch in prange(nchunk):
        for r in range(ch * n // nchunk, (ch + 1) * n // nchunk):
            out[0, r] = _row_q8_0x2(wf, r * nbytes, xa, ng)


@njit(cache=True, nogil=True, parallel=True)
def _add_tails(out, wf, nbytes, xq, xd, xs, kind, b0, nb):
    """out[0, r] += blocks b0..nb-1 of each Q4_0 (kind 0) or Q8_0 row: what the groups left."""
    n = out.shape[1]
    nchunk = max(1, min(n, n // 16))
    for ch in prange(nchunk):
        for r in range(ch * n // nchunk, (ch + 1) * n // nchunk):
            if kind == 0:
                out[0, r] += _row_q4_0(wf, r * nbytes, xq, xd, xs, b0, nb)
            else:
                out[0, r] += _row_q8_0(wf, r * nbytes, xq, xd, b0, nb)


@njit(cache=True, nogil=True, parallel=True)
def qmatvec(out, xq, xd, xs, w, kind):
    """out (1, N) f32 = one activation row (quant.quantize_act form) @ W.T, W of a FUSED_KINDS type.

    parallel=True: output rows are independent; the caller sets the thread count.
    xq (1, C) int8, xd (1, C/32), xs (1, C/16) f32; w (N, row_bytes) uint8 C-contig.
    """
    c = xq.shape[1]
    n, nbytes = w.shape
    nb = c // 32
    wf = w.reshape(-1)
    xqf = xq.reshape(-1)
    xdf = xd.reshape(-1)
    xsf = xs.reshape(-1)
    # blocks done by the 16-lane groups; the rest (nb % 4 or nb % 2) by the 8-lane rows
    ng = (nb // 4 if kind == 0 else nb // 2) if HAS_AVX512 and (kind == 0 or kind == 4) else 0
    if ng == 0:
        xa = np.empty(0, np.int8)
    elif kind == 0:
        xa = _act_q4_0(xqf, xdf, ng)
    else:
        xa = _act_q8_0(xqf, xdf, ng)
    if ng > 0:
        if kind == 0:
            _matvec_q4_0x4(out, wf, nbytes, xa, ng)
            b0 = 4 * ng
        else:
            _matvec_q8_0x2(out, wf, nbytes, xa, ng)
            b0 = 2 * ng
        if b0 < nb:  # C % 128 (Q4_0) or C % 64 (Q8_0) left over: a second, short pass
            _add_tails(out, wf, nbytes, xqf, xdf, xsf, kind, b0, nb)
        return
    nchunk = max(1, min(n, n // 16))
    for ch in prange(nchunk):
        for r in range(ch * n // nchunk, (ch + 1) * n // nchunk):
            base = r * nbytes
            if kind == 0:
                v = _row_q4_0(wf, base, xqf, xdf, xsf, 0, nb)
            else:
                v = _row_q8_0(wf, base, xqf, xdf, 0, nb)
            out[0, r] = v
