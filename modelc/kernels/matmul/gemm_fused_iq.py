"""Single-token (T=1) matvec for the 32-element-block 4-bit code-book types (IQ4_NL, MXFP4) from the stored blocks.

IQ4_XS (256-element super-blocks) runs gemm_fused_k.qmatvec_k's super-block loop with qdot_iq.iq4xs_block;
the grid i-quants and the ternary types run gemm_fused_grid's kernels (qmatvec_iq sends them there).

gemm_fused.qmatvec's contract for these kinds: each 32-element block's 16 code
bytes go through one vpshufb (qdot_iq) into signed int8 values and straight into
the int8 dot with the quantized activation (qdot.dot_i8x32), times the block's
scale and the activation block's scale; nothing is unpacked to memory. Two weight
rows go through the loop together so they share the activation loads, and each
row prefetches PREFETCH_BYTES ahead. The numpy twin is ref_linear.matmul_qact.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from modelc.kernels.matmul import gemm_fused_grid
from modelc.kernels.quant.quant_iq import E8M0_HALF, IQ4_NL, MXFP4
from modelc.kernels.simd.qdot import (
    dot_i8x32,
    f16_at,
    fma_i32x8,
    hsum_f32x8,
    hsum_f32x16,
    load_i8x32,
    prefetch,
    splat_f32x8,
    zeros_f32x8,
    zeros_f32x16,
)
from modelc.kernels.simd.qdot_iq import iq4nl_blocks8, iq4nl_i8x32, mxfp4_blocks8, mxfp4_i8x32

KINDS_4BIT = frozenset({IQ4_NL, MXFP4})
"""Kinds _qmatvec_4bit serves."""
KINDS = KINDS_4BIT | gemm_fused_grid.KINDS
"""Kinds qmatvec_iq serves: the 4-bit code books here, the grid and ternary kinds in gemm_fused_grid."""

_ROWS_PER_TASK = 16
PREFETCH_BYTES = 8192
"""Prefetch distance, as gemm_fused_k (the same streaming pattern)."""


@njit(cache=True, nogil=True, inline="always")
def _rows_32(kind, out, w, nbytes, xq, xd, xm, nb, r0, r1):
    """IQ4_NL / MXFP4 rows r0..r1-1 (32-element blocks), two rows per pass: groups of 8 blocks through
    qdot_iq's 16-lane intrinsics, the nb % 8 blocks left one at a time in 8 lanes."""
    bsize = 18 if kind == IQ4_NL else 17
    ng = nb // 8
    for r in range(r0, r1, 2):
        w0 = zeros_f32x16()
        w1 = zeros_f32x16()
        a0 = zeros_f32x8()
        a1 = zeros_f32x8()
        o0 = r * nbytes
        o1 = o0 + nbytes if r + 1 < r1 else o0  # an odd last row is computed twice, stored once
        for g in range(ng):
            p0 = o0 + g * 8 * bsize
            p1 = o1 + g * 8 * bsize
            for k in range(0, 8 * 18, 64):
                prefetch(w, p0 + PREFETCH_BYTES + k)
                prefetch(w, p1 + PREFETCH_BYTES + k)
            if kind == IQ4_NL:
                w0 = iq4nl_blocks8(w0, w, p0, xq, xd, xm, g * 256)
                w1 = iq4nl_blocks8(w1, w, p1, xq, xd, xm, g * 256)
            else:
                w0 = mxfp4_blocks8(w0, w, p0, xq, xd, xm, g * 256)
                w1 = mxfp4_blocks8(w1, w, p1, xq, xd, xm, g * 256)
        for b in range(8 * ng, nb):
            p0 = o0 + b * bsize
            p1 = o1 + b * bsize
            if b % 4 == 0:
                prefetch(w, p0 + PREFETCH_BYTES)
                prefetch(w, p1 + PREFETCH_BYTES)
            x = load_i8x32(xq, b * 32)
            if kind == IQ4_NL:
                d0 = f16_at(w, p0)
                d1 = f16_at(w, p1)
                v0 = iq4nl_i8x32(w, p0 + 2)
                v1 = iq4nl_i8x32(w, p1 + 2)
            else:
                d0 = E8M0_HALF[w[p0]]
                d1 = E8M0_HALF[w[p1]]
                v0 = mxfp4_i8x32(w, p0 + 1)
                v1 = mxfp4_i8x32(w, p1 + 1)
            a0 = fma_i32x8(a0, dot_i8x32(v0, x), splat_f32x8(d0 * xd[b]))
            a1 = fma_i32x8(a1, dot_i8x32(v1, x), splat_f32x8(d1 * xd[b]))
        out[0, r] = hsum_f32x16(w0) + hsum_f32x8(a0)
        if r + 1 < r1:
            out[0, r + 1] = hsum_f32x16(w1) + hsum_f32x8(a1)


def qmatvec_iq(out, xq, xd, xs, w, kind):
    """out (T, N) f32 = activation rows (quant.quantize_act form) @ W.T, W of a KINDS type: T = 1 for the
    4-bit code books, T <= plan.GRID_MAX_T for the grid kinds (plan.plan_matmul's MATVEC_IQ)."""
    if kind in KINDS_4BIT:
        _qmatvec_4bit(out, xq, xd, xs, w, kind)
    else:
        gemm_fused_grid.qmatvec_grid(out, xq, xd, xs, w, kind)


@njit(cache=True, nogil=True, parallel=True)
def _qmatvec_4bit(out, xq, xd, xs, w, kind):
    """out (1, N) f32 = one activation row (quant.quantize_act form) @ W.T, W IQ4_NL or MXFP4.

    parallel=True over tasks of 16 output rows; the caller sets the thread count.
    xq (1, C) int8, xd (1, C/32), xs (1, C/16) f32 (its per-32 sums undo the +128 code offset);
    w (N, row_bytes) uint8 C-contig; C % 32 == 0.
    """
    c = xq.shape[1]
    n, nbytes = w.shape
    wf = w.reshape(-1)
    xqf = xq.reshape(-1)
    xdf = xd.reshape(-1)
    xsf = xs.reshape(-1)
    xm = np.empty(c // 32, np.float32)  # (C/32,) per-32 activation sums, for the +128 code offset
    for k in range(c // 32):
        xm[k] = xsf[2 * k] + xsf[2 * k + 1]
    ntask = max(1, min(n, n // _ROWS_PER_TASK))
    for t in prange(ntask):
        _rows_32(kind, out, wf, nbytes, xqf, xdf, xm, c // 32, t * n // ntask, (t + 1) * n // ntask)
