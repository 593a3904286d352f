"""Single-token (T=1) matvec for the commonest types, unpacking each block in registers.

At T=1 nothing amortizes gemm_int's unpack-to-L1 pass, so these kernels read
Q4_0 / Q8_0 / Q4_K / Q5_K / Q6_K blocks straight from the stored bytes and feed the
int8 dot (qdot) directly. Same numbers as gemm_int up to float summation order; the
numpy twin is ref_linear.matmul_qact.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from modelc.ir import DataType
from modelc.kernels.qdot import (
    bits_i8x32,
    dot_i8x32,
    dotu_i8x32,
    f16_at,
    fma_f32x8,
    fma_i32x8,
    halves_f32x8,
    hsum_f32x8,
    load_f32x8,
    load_i8_f32x8,
    load_i8x32,
    mul_f32x8,
    nib16_i8x32,
    or_i8x32,
    shl_i8x32,
    splat_f32x8,
    store_f32x8,
    zeros_f32x8,
)
from modelc.kernels.quant import KIND

FUSED_KINDS = frozenset(
    {KIND[DataType.Q4_0], KIND[DataType.Q8_0], KIND[DataType.Q4_K], KIND[DataType.Q5_K], KIND[DataType.Q6_K]}
)


@njit(cache=True, nogil=True, inline="always")
def _row_q4_0(w, base, xq, xd, xs, nb):
    acc0 = zeros_f32x8()
    acc1 = zeros_f32x8()
    m = np.float32(0.0)
    for b in range(0, nb - 1, 2):
        o = base + b * 18
        d0 = f16_at(w, o)
        d1 = f16_at(w, o + 18)
        p0 = dotu_i8x32(nib16_i8x32(w, o + 2), load_i8x32(xq, b * 32))
        p1 = dotu_i8x32(nib16_i8x32(w, o + 20), load_i8x32(xq, b * 32 + 32))
        acc0 = fma_i32x8(acc0, p0, splat_f32x8(d0 * xd[b]))
        acc1 = fma_i32x8(acc1, p1, splat_f32x8(d1 * xd[b + 1]))
        m += d0 * (xs[2 * b] + xs[2 * b + 1]) + d1 * (xs[2 * b + 2] + xs[2 * b + 3])
    if nb % 2:
        b = nb - 1
        o = base + b * 18
        d0 = f16_at(w, o)
        p0 = dotu_i8x32(nib16_i8x32(w, o + 2), load_i8x32(xq, b * 32))
        acc0 = fma_i32x8(acc0, p0, splat_f32x8(d0 * xd[b]))
        m += d0 * (xs[2 * b] + xs[2 * b + 1])
    return hsum_f32x8(acc0) + hsum_f32x8(acc1) - np.float32(8.0) * m


@njit(cache=True, nogil=True, inline="always")
def _row_q8_0(w, base, xq, xd, nb):
    acc0 = zeros_f32x8()
    acc1 = zeros_f32x8()
    for b in range(0, nb - 1, 2):
        o = base + b * 34
        p0 = dot_i8x32(load_i8x32(w, o + 2), load_i8x32(xq, b * 32))
        p1 = dot_i8x32(load_i8x32(w, o + 36), load_i8x32(xq, b * 32 + 32))
        acc0 = fma_i32x8(acc0, p0, splat_f32x8(f16_at(w, o) * xd[b]))
        acc1 = fma_i32x8(acc1, p1, splat_f32x8(f16_at(w, o + 34) * xd[b + 1]))
    if nb % 2:
        b = nb - 1
        o = base + b * 34
        p0 = dot_i8x32(load_i8x32(w, o + 2), load_i8x32(xq, b * 32))
        acc0 = fma_i32x8(acc0, p0, splat_f32x8(f16_at(w, o) * xd[b]))
    return hsum_f32x8(acc0) + hsum_f32x8(acc1)


@njit(cache=True, nogil=True, inline="always")
def _row_q4_k(w, base, xq, xd, xs, nsb):
    acc0 = zeros_f32x8()
    acc1 = zeros_f32x8()
    m = np.float32(0.0)
    for b in range(nsb):
        o = base + b * 144
        d = f16_at(w, o)
        dmin = f16_at(w, o + 2)
        for j in range(4):
            # chunk j (scale/min from bytes a_j, m_j) and chunk j+4 (from md_j plus the
            # top bits of a_j, m_j) read the low/high nibbles of the same 32 bytes
            aj = np.int32(w[o + 4 + j])
            mj = np.int32(w[o + 8 + j])
            mdj = np.int32(w[o + 12 + j])
            c0 = b * 8 + j
            c1 = c0 + 4
            qo = o + 16 + (j // 2) * 32
            sh = 4 * (j % 2)
            p0 = dotu_i8x32(bits_i8x32(w, qo, sh, 15), load_i8x32(xq, c0 * 32))
            p1 = dotu_i8x32(bits_i8x32(w, qo + 64, sh, 15), load_i8x32(xq, c1 * 32))
            acc0 = fma_i32x8(acc0, p0, splat_f32x8(d * np.float32(aj & 63) * xd[c0]))
            acc1 = fma_i32x8(acc1, p1, splat_f32x8(d * np.float32((mdj & 15) | ((aj >> 6) << 4)) * xd[c1]))
            m0 = np.float32(mj & 63)
            m1 = np.float32((mdj >> 4) | ((mj >> 6) << 4))
            m += dmin * (m0 * (xs[2 * c0] + xs[2 * c0 + 1]) + m1 * (xs[2 * c1] + xs[2 * c1 + 1]))
    return hsum_f32x8(acc0) + hsum_f32x8(acc1) - m


@njit(cache=True, nogil=True, inline="always")
def _row_q5_k(w, base, xq, xd, xs, nsb):
    """Q4_K's layout plus a 32-byte plane of fifth bits (bit c of qh[l] for chunk c)."""
    acc0 = zeros_f32x8()
    acc1 = zeros_f32x8()
    m = np.float32(0.0)
    for b in range(nsb):
        o = base + b * 176
        d = f16_at(w, o)
        dmin = f16_at(w, o + 2)
        for j in range(4):
            aj = np.int32(w[o + 4 + j])
            mj = np.int32(w[o + 8 + j])
            mdj = np.int32(w[o + 12 + j])
            c0 = b * 8 + j
            c1 = c0 + 4
            qo = o + 48 + (j // 2) * 32
            sh = 4 * (j % 2)
            u0 = or_i8x32(bits_i8x32(w, qo, sh, 15), shl_i8x32(bits_i8x32(w, o + 16, j, 1), 4))
            u1 = or_i8x32(bits_i8x32(w, qo + 64, sh, 15), shl_i8x32(bits_i8x32(w, o + 16, j + 4, 1), 4))
            p0 = dotu_i8x32(u0, load_i8x32(xq, c0 * 32))
            p1 = dotu_i8x32(u1, load_i8x32(xq, c1 * 32))
            acc0 = fma_i32x8(acc0, p0, splat_f32x8(d * np.float32(aj & 63) * xd[c0]))
            acc1 = fma_i32x8(acc1, p1, splat_f32x8(d * np.float32((mdj & 15) | ((aj >> 6) << 4)) * xd[c1]))
            m0 = np.float32(mj & 63)
            m1 = np.float32((mdj >> 4) | ((mj >> 6) << 4))
            m += dmin * (m0 * (xs[2 * c0] + xs[2 * c0 + 1]) + m1 * (xs[2 * c1] + xs[2 * c1 + 1]))
    return hsum_f32x8(acc0) + hsum_f32x8(acc1) - m


@njit(cache=True, nogil=True, inline="always")
def _row_q6_k(w, base, xq, xd, xs, nsb, sbuf):
    """sbuf: (16,) f32 scratch for one super-block's sub-block scales."""
    acc0 = zeros_f32x8()
    acc1 = zeros_f32x8()
    macc = zeros_f32x8()
    for b in range(nsb):
        o = base + b * 210
        dv = splat_f32x8(f16_at(w, o + 208))
        s0 = mul_f32x8(dv, load_i8_f32x8(w, o + 192))  # scales of sub-blocks 0..7
        s1 = mul_f32x8(dv, load_i8_f32x8(w, o + 200))  # 8..15
        store_f32x8(sbuf, 0, s0)
        store_f32x8(sbuf, 8, s1)
        # q = u - 32: the offset's share is 32 * sum_g scale_g * xs_g
        macc = fma_f32x8(macc, s0, load_f32x8(xs, b * 16))
        macc = fma_f32x8(macc, s1, load_f32x8(xs, b * 16 + 8))
        for c in range(0, 8, 2):
            k = b * 8 + c
            h, s4 = c // 4, c % 4
            sh = 4 * (s4 // 2)  # chunks 0,1 of a half: low nibbles; 2,3: high nibbles
            hi0 = shl_i8x32(bits_i8x32(w, o + 128 + h * 32, 2 * s4, 3), 4)
            hi1 = shl_i8x32(bits_i8x32(w, o + 128 + h * 32, 2 * s4 + 2, 3), 4)
            u0 = or_i8x32(bits_i8x32(w, o + h * 64, sh, 15), hi0)
            u1 = or_i8x32(bits_i8x32(w, o + h * 64 + 32, sh, 15), hi1)
            p0 = dotu_i8x32(u0, load_i8x32(xq, k * 32))
            p1 = dotu_i8x32(u1, load_i8x32(xq, k * 32 + 32))
            acc0 = fma_i32x8(acc0, p0, mul_f32x8(halves_f32x8(sbuf[2 * c], sbuf[2 * c + 1]), splat_f32x8(xd[k])))
            acc1 = fma_i32x8(
                acc1, p1, mul_f32x8(halves_f32x8(sbuf[2 * c + 2], sbuf[2 * c + 3]), splat_f32x8(xd[k + 1]))
            )
    return hsum_f32x8(acc0) + hsum_f32x8(acc1) - np.float32(32.0) * hsum_f32x8(macc)


@njit(cache=True, nogil=True, parallel=True)
def qmatvec(out, xq, xd, xs, w, kind):
    """out (1, N) f32 = one activation row (quant.quantize_act form) @ W.T, W of a FUSED_KINDS type.

    parallel=True: output rows are independent; the caller sets the thread count.
    xq (1, C) int8, xd (1, C/32), xs (1, C/16) f32; w (N, row_bytes) uint8 C-contig.
    """
    c = xq.shape[1]
    n, nbytes = w.shape
    wf = w.reshape(-1)
    xqf = xq.reshape(-1)
    xdf = xd.reshape(-1)
    xsf = xs.reshape(-1)
    nchunk = max(1, min(n, n // 16))
    for ch in prange(nchunk):
        sbuf = np.empty(16, np.float32)
        for r in range(ch * n // nchunk, (ch + 1) * n // nchunk):
            base = r * nbytes
            if kind == 0:
                v = _row_q4_0(wf, base, xqf, xdf, xsf, c // 32)
            elif kind == 4:
                v = _row_q8_0(wf, base, xqf, xdf, c // 32)
            elif kind == 7:
                v = _row_q4_k(wf, base, xqf, xdf, xsf, c // 256)
            elif kind == 8:
                v = _row_q5_k(wf, base, xqf, xdf, xsf, c // 256)
            else:
                v = _row_q6_k(wf, base, xqf, xdf, xsf, c // 256, sbuf)
            out[0, r] = v
