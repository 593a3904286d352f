"""Decode matmul (T = 1 .. plan.GRID_MAX_T) for the grid i-quants (IQ2_*, IQ3_*, IQ1_*) and the ternary types, from the stored blocks.

One row loop (`_row`) for every type, specialised per type: each entry
(`qmatvec_grid` picks one) passes its kind as a constant into the inlined
loop, so LLVM folds the per-type branches away and each type compiles (and
is warmed) alone. Per 256-weight block, grid_blocks.prep decodes its 256 sign
bits and 16 half-sub-block scales as vectors once (times each activation
row's scales); then per pair of 32-element sub-blocks grid_blocks.grid2 builds
the 64 weights in a register from scalar grid lookups, the sign bits go on the
int8 activations and one 512-bit int8 dot follows (grid_blocks.dot2), its 16
lanes scaled and accumulated in fp32; nothing is unpacked to memory (the ROWS
path, gemm_int.qmatmul_rows, writes each row to L1 first). TQ1_0 / TQ2_0: the
-1 of w = d * (trit - 1) comes back as d * (the block's activation sum). With
several tokens, each pair's weights are built once for up to four activation
rows. Activations: quant.quantize_act's (xq, xd, xs). The numpy twin is
ref_linear.matmul_qact.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from modelc.kernels.quant.grid_blocks import dot2, grid2, prep, ternary_d, tsize
from modelc.kernels.quant.quant_iq import IQ1_M, IQ1_S, IQ2_S, IQ2_XS, IQ2_XXS, IQ3_S, IQ3_XXS, TQ1_0, TQ2_0
from modelc.kernels.simd.qdot import hsum_f32x16, mul_f32x16, prefetch, zeros_f32x16
from modelc.kernels.simd.qdot_grid import dup8_f32x16, fma_i32x16, lane64, spread4_f32x16

_ROWS_PER_TASK = 16
PREFETCH_BYTES = 4096
"""Prefetch distance (bytes ahead in the row): these kernels spend more time per byte than Q4_K's."""


@njit(cache=True, nogil=True, inline="always")
def _row(kind, nt, w, o, xq, xd, xsb, nb, i0):
    """Row at byte o of w dotted with activation rows i0 .. i0+nt-1 (nt 1..4; kind a constant after inlining):
    sub-blocks in pairs (one 64-byte dot each), each pair's weights built once for the nt rows. Returns four
    sums (those past nt are 0)."""
    size = tsize(kind)
    c = nb * 256
    acc0 = zeros_f32x16()
    acc1 = zeros_f32x16()
    acc2 = zeros_f32x16()
    acc3 = zeros_f32x16()
    for b in range(nb):
        ob = o + b * size
        prefetch(w, ob + PREFETCH_BYTES)
        prefetch(w, ob + PREFETCH_BYTES + 64)
        signs, ws = prep(kind, w, ob)
        e = i0 * (c // 32) + 8 * b
        sc0 = mul_f32x16(ws, dup8_f32x16(xd, e))  # (16,) half sub-block scale x activation scale
        sc1 = mul_f32x16(ws, dup8_f32x16(xd, e + c // 32)) if nt > 1 else sc0
        sc2 = mul_f32x16(ws, dup8_f32x16(xd, e + 2 * (c // 32))) if nt > 2 else sc0
        sc3 = mul_f32x16(ws, dup8_f32x16(xd, e + 3 * (c // 32))) if nt > 3 else sc0
        xo = i0 * c + 256 * b
        for p in range(4):
            g = grid2(kind, w, ob, 2 * p)
            sb = lane64(signs, p)
            acc0 = fma_i32x16(acc0, dot2(kind, g, sb, xq, xo + 64 * p), spread4_f32x16(sc0, p))
            if nt > 1:
                acc1 = fma_i32x16(acc1, dot2(kind, g, sb, xq, xo + c + 64 * p), spread4_f32x16(sc1, p))
            if nt > 2:
                acc2 = fma_i32x16(acc2, dot2(kind, g, sb, xq, xo + 2 * c + 64 * p), spread4_f32x16(sc2, p))
            if nt > 3:
                acc3 = fma_i32x16(acc3, dot2(kind, g, sb, xq, xo + 3 * c + 64 * p), spread4_f32x16(sc3, p))
    s0, s1, s2, s3 = hsum_f32x16(acc0), hsum_f32x16(acc1), hsum_f32x16(acc2), hsum_f32x16(acc3)
    if kind == TQ1_0 or kind == TQ2_0:  # w = d * (trit - 1): take d * (the block's activation sum) back out
        for b in range(nb):
            d = ternary_d(kind, w, o + b * size)
            s0 -= d * xsb[i0 * nb + b]
            if nt > 1:
                s1 -= d * xsb[(i0 + 1) * nb + b]
            if nt > 2:
                s2 -= d * xsb[(i0 + 2) * nb + b]
            if nt > 3:
                s3 -= d * xsb[(i0 + 3) * nb + b]
    return s0, s1, s2, s3


@njit(cache=True, nogil=True, inline="always")
def _rows(kind, out, xq, xd, xsb, w, nbytes, nb, r0, r1):
    """out[:, r0:r1] for rows r0..r1-1: T = 1 on a loop of its own, more tokens in groups of four."""
    t = out.shape[0]
    for r in range(r0, r1):
        if t == 1:
            out[0, r] = _row(kind, 1, w, r * nbytes, xq, xd, xsb, nb, 0)[0]
            continue
        i = 0
        while i < t:
            nt = min(4, t - i)
            s0, s1, s2, s3 = _row(kind, nt, w, r * nbytes, xq, xd, xsb, nb, i)
            out[i, r] = s0
            if nt > 1:
                out[i + 1, r] = s1
            if nt > 2:
                out[i + 2, r] = s2
            if nt > 3:
                out[i + 3, r] = s3
            i += 4


@njit(cache=True, nogil=True, inline="always")
def _prep(xq, xd, xs, w):
    """Flat views and the per-block activation sums (the ternary types' -1; cheap, so always computed)."""
    t, c = xq.shape
    nb = c // 256
    xsf = xs.reshape(-1)
    xsb = np.zeros(t * nb, np.float32)  # (T, C/256)
    for k in range(t * c // 16):
        xsb[k // 16] += xsf[k]
    n = w.shape[0]
    return w.reshape(-1), xq.reshape(-1), xd.reshape(-1), xsb, nb, max(1, min(n, n // _ROWS_PER_TASK))


# Per kind: a row-range function (`_rows` with the kind a constant; not inlined into the prange loop, so the
# parallel pass sees a call, not the whole decoder) and the parallel entry. Contract of each entry: out (T, N)
# f32 = activation rows (quant.quantize_act's xq (T, C) int8, xd (T, C/32), xs (T, C/16) f32) @ W.T; w (N,
# row_bytes) uint8 C-contig, C % 256 == 0. parallel=True over tasks of 16 output rows; the caller sets the
# thread count. Only the kinds a model has get compiled.


@njit(cache=True, nogil=True)
def _rows_iq2xxs(out, xq, xd, xsb, w, nbytes, nb, r0, r1):
    _rows(IQ2_XXS, out, xq, xd, xsb, w, nbytes, nb, r0, r1)


@njit(cache=True, nogil=True, parallel=True)
def qmatmul_iq2xxs(out, xq, xd, xs, w):
    wf, xqf, xdf, xsb, nb, ntask = _prep(xq, xd, xs, w)
    n, nbytes = w.shape
    for task in prange(ntask):
        _rows_iq2xxs(out, xqf, xdf, xsb, wf, nbytes, nb, task * n // ntask, (task + 1) * n // ntask)


@njit(cache=True, nogil=True)
def _rows_iq2xs(out, xq, xd, xsb, w, nbytes, nb, r0, r1):
    _rows(IQ2_XS, out, xq, xd, xsb, w, nbytes, nb, r0, r1)


@njit(cache=True, nogil=True, parallel=True)
def qmatmul_iq2xs(out, xq, xd, xs, w):
    wf, xqf, xdf, xsb, nb, ntask = _prep(xq, xd, xs, w)
    n, nbytes = w.shape
    for task in prange(ntask):
        _rows_iq2xs(out, xqf, xdf, xsb, wf, nbytes, nb, task * n // ntask, (task + 1) * n // ntask)


@njit(cache=True, nogil=True)
def _rows_iq2s(out, xq, xd, xsb, w, nbytes, nb, r0, r1):
    _rows(IQ2_S, out, xq, xd, xsb, w, nbytes, nb, r0, r1)


@njit(cache=True, nogil=True, parallel=True)
def qmatmul_iq2s(out, xq, xd, xs, w):
    wf, xqf, xdf, xsb, nb, ntask = _prep(xq, xd, xs, w)
    n, nbytes = w.shape
    for task in prange(ntask):
        _rows_iq2s(out, xqf, xdf, xsb, wf, nbytes, nb, task * n // ntask, (task + 1) * n // ntask)


@njit(cache=True, nogil=True)
def _rows_iq3xxs(out, xq, xd, xsb, w, nbytes, nb, r0, r1):
    _rows(IQ3_XXS, out, xq, xd, xsb, w, nbytes, nb, r0, r1)


@njit(cache=True, nogil=True, parallel=True)
def qmatmul_iq3xxs(out, xq, xd, xs, w):
    wf, xqf, xdf, xsb, nb, ntask = _prep(xq, xd, xs, w)
    n, nbytes = w.shape
    for task in prange(ntask):
        _rows_iq3xxs(out, xqf, xdf, xsb, wf, nbytes, nb, task * n // ntask, (task + 1) * n // ntask)


@njit(cache=True, nogil=True)
def _rows_iq3s(out, xq, xd, xsb, w, nbytes, nb, r0, r1):
    _rows(IQ3_S, out, xq, xd, xsb, w, nbytes, nb, r0, r1)


@njit(cache=True, nogil=True, parallel=True)
def qmatmul_iq3s(out, xq, xd, xs, w):
    wf, xqf, xdf, xsb, nb, ntask = _prep(xq, xd, xs, w)
    n, nbytes = w.shape
    for task in prange(ntask):
        _rows_iq3s(out, xqf, xdf, xsb, wf, nbytes, nb, task * n // ntask, (task + 1) * n // ntask)


@njit(cache=True, nogil=True)
def _rows_iq1s(out, xq, xd, xsb, w, nbytes, nb, r0, r1):
    _rows(IQ1_S, out, xq, xd, xsb, w, nbytes, nb, r0, r1)


@njit(cache=True, nogil=True, parallel=True)
def qmatmul_iq1s(out, xq, xd, xs, w):
    wf, xqf, xdf, xsb, nb, ntask = _prep(xq, xd, xs, w)
    n, nbytes = w.shape
    for task in prange(ntask):
        _rows_iq1s(out, xqf, xdf, xsb, wf, nbytes, nb, task * n // ntask, (task + 1) * n // ntask)


@njit(cache=True, nogil=True)
def _rows_iq1m(out, xq, xd, xsb, w, nbytes, nb, r0, r1):
    _rows(IQ1_M, out, xq, xd, xsb, w, nbytes, nb, r0, r1)


@njit(cache=True, nogil=True, parallel=True)
def qmatmul_iq1m(out, xq, xd, xs, w):
    wf, xqf, xdf, xsb, nb, ntask = _prep(xq, xd, xs, w)
    n, nbytes = w.shape
    for task in prange(ntask):
        _rows_iq1m(out, xqf, xdf, xsb, wf, nbytes, nb, task * n // ntask, (task + 1) * n // ntask)


@njit(cache=True, nogil=True)
def _rows_tq1(out, xq, xd, xsb, w, nbytes, nb, r0, r1):
    _rows(TQ1_0, out, xq, xd, xsb, w, nbytes, nb, r0, r1)


@njit(cache=True, nogil=True, parallel=True)
def qmatmul_tq1(out, xq, xd, xs, w):
    wf, xqf, xdf, xsb, nb, ntask = _prep(xq, xd, xs, w)
    n, nbytes = w.shape
    for task in prange(ntask):
        _rows_tq1(out, xqf, xdf, xsb, wf, nbytes, nb, task * n // ntask, (task + 1) * n // ntask)


@njit(cache=True, nogil=True)
def _rows_tq2(out, xq, xd, xsb, w, nbytes, nb, r0, r1):
    _rows(TQ2_0, out, xq, xd, xsb, w, nbytes, nb, r0, r1)


@njit(cache=True, nogil=True, parallel=True)
def qmatmul_tq2(out, xq, xd, xs, w):
    wf, xqf, xdf, xsb, nb, ntask = _prep(xq, xd, xs, w)
    n, nbytes = w.shape
    for task in prange(ntask):
        _rows_tq2(out, xqf, xdf, xsb, wf, nbytes, nb, task * n // ntask, (task + 1) * n // ntask)


KERNELS = {
    IQ2_XXS: qmatmul_iq2xxs,
    IQ2_XS: qmatmul_iq2xs,
    IQ2_S: qmatmul_iq2s,
    IQ3_XXS: qmatmul_iq3xxs,
    IQ3_S: qmatmul_iq3s,
    IQ1_S: qmatmul_iq1s,
    IQ1_M: qmatmul_iq1m,
    TQ1_0: qmatmul_tq1,
    TQ2_0: qmatmul_tq2,
}
KINDS = frozenset(KERNELS)
"""Kinds qmatvec_grid serves."""


def qmatvec_grid(out, xq, xd, xs, w, kind):
    """out (T, N) f32 = xq-form activations @ W.T for a kind in KINDS (the kernel of that kind)."""
    KERNELS[kind](out, xq, xd, xs, w)
