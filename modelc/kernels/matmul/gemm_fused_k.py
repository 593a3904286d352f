"""Single-token (T=1) matvec for the 256-element super-block types (Q4_K, Q5_K, Q6_K, IQ4_XS), a super-block at a time.

gemm_fused.qmatvec's contract for these kinds, built on the whole super-block
intrinsics of qdot_k (and qdot_iq.iq4xs_block for IQ4_XS): scales and mins are decoded as vectors, each pair of
32-element chunks is one int8 dot, and two weight rows go through the loop
together so they share the activation loads; one cursor prefetches
PREFETCH_BYTES ahead of the task's contiguous rows, once per cache line. Same numbers as
ref_linear.matmul_qact up to float summation order (the numpy twin).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from modelc.ir import DataType
from modelc.kernels.quant.quant import KIND
from modelc.kernels.quant.quant_iq import IQ4_XS
from modelc.kernels.simd.qdot import hsum_f32x16, prefetch, zeros_f32x16
from modelc.kernels.simd.qdot_iq import iq4xs_block
from modelc.kernels.simd.qdot_k import q4k_block, q5k_block, q6k_block

KINDS = frozenset({KIND[DataType.Q4_K], KIND[DataType.Q5_K], KIND[DataType.Q6_K], IQ4_XS})
"""Kinds qmatvec_k serves (Q4_K = 7, Q5_K = 8, Q6_K = 9, IQ4_XS)."""

_ROWS_PER_TASK = 16
PREFETCH_BYTES = 8192
"""How far ahead of the bytes being dotted the kernel prefetches (into L1), one prefetch per
cache line. Software prefetch is what makes the stream fast: on the 2-vCPU EPYC VM a plain
sequential read ran at 7 GB/s without it and 22-25 GB/s with it (1 thread)."""


@njit(cache=True, nogil=True, inline="always")
def _rows(kind, out, w, nbytes, xq, xd, xm, xs, nsb, r0, r1):
    """out[0, r0:r1] for rows r0..r1-1 of the flat weight bytes w, two rows per pass.

    Rows r0..r1-1 are one contiguous stretch of w, read front to back (a pair of rows at a
    time), so one cursor walks PREFETCH_BYTES ahead of the pair's progress and prefetches
    each cache line once. (Prefetching PREFETCH_BYTES past each row's own position instead,
    four lines per super-block per row, streamed at 0.65-0.7x: 14.8 vs 22.6 GB/s, 2 threads,
    TinyLlama Q4_K_M matrices, /tmp/exp/pf.py of the #20 work, quiet VM.)
    The intrinsics are called right here, not through a helper taking the arrays:
    numba would incref/decref every array argument of each helper call.
    """
    bsize = 144 if kind == 7 else (176 if kind == 8 else (210 if kind == 9 else 136))
    pf = r0 * nbytes + PREFETCH_BYTES  # the next cache line to prefetch
    for r in range(r0, r1, 2):
        a0 = zeros_f32x16()
        a1 = zeros_f32x16()
        o0 = r * nbytes
        o1 = o0 + nbytes if r + 1 < r1 else o0  # an odd last row is computed twice, stored once
        for b in range(nsb):
            p0 = o0 + b * bsize
            p1 = o1 + b * bsize
            ahead = o0 + 2 * (b + 1) * bsize + PREFETCH_BYTES  # the pair has read ~2 (b + 1) blocks
            while pf < ahead:
                prefetch(w, pf)
                pf += 64
            if kind == 7:
                a0 = q4k_block(a0, w, p0, xq, xd, xm, b * 256)
                a1 = q4k_block(a1, w, p1, xq, xd, xm, b * 256)
            elif kind == 8:
                a0 = q5k_block(a0, w, p0, xq, xd, xm, b * 256)
                a1 = q5k_block(a1, w, p1, xq, xd, xm, b * 256)
            elif kind == 9:
                a0 = q6k_block(a0, w, p0, xq, xd, xs, b * 256)
                a1 = q6k_block(a1, w, p1, xq, xd, xs, b * 256)
            else:
                a0 = iq4xs_block(a0, w, p0, xq, xd, xm, b * 256)
                a1 = iq4xs_block(a1, w, p1, xq, xd, xm, b * 256)
        out[0, r] = hsum_f32x16(a0)
        if r + 1 < r1:
            out[0, r + 1] = hsum_f32x16(a1)


@njit(cache=True, nogil=True, parallel=True)
def qmatvec_k(out, xq, xd, xs, w, kind):
    """out (1, N) f32 = one activation row (quant.quantize_act form) @ W.T, W of a KINDS type.

    parallel=True over tasks of 16 output rows; the caller sets the thread count.
    xq (1, C) int8, xd (1, C/32), xs (1, C/16) f32; w (N, row_bytes) uint8 C-contig; C % 256 == 0.
    """
    c = xq.shape[1]
    n, nbytes = w.shape
    wf = w.reshape(-1)
    xqf = xq.reshape(-1)
    xdf = xd.reshape(-1)
    xsf = xs.reshape(-1)
    xm = np.empty(c // 32, np.float32)  # (C/32,) per-32 activation sums: the mins, IQ4_XS's +128 code offset
    for k in range(c // 32):
        xm[k] = xsf[2 * k] + xsf[2 * k + 1]
    ntask = max(1, min(n, n // _ROWS_PER_TASK))
    for t in prange(ntask):
        _rows(kind, out, wf, nbytes, xqf, xdf, xm, xsf, c // 256, t * n // ntask, (t + 1) * n // ntask)
