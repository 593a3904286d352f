"""Single-token (T=1) matvec for the grid i-quants (IQ2_*, IQ3_*, IQ1_*) and the ternary types, from the stored blocks.

One row loop (`_row`) for every type, specialised per type: each entry
(`qmatvec_grid` picks one) passes its kind as a constant into the inlined
loop, so LLVM folds the per-type branches away and each type compiles (and
is warmed) alone. Per 32-element sub-block the type's decoder builds the
weights in a register from scalar grid lookups (qdot_grid.grid_i8x32), puts
the sign bits on the int8 activation (qdot_grid.signs_i8x32) and dots with
qdot.dotu_i8x32; nothing is unpacked to memory (the ROWS path,
gemm_int.qmatmul_rows, writes each row to L1 first). IQ1_*: the values
8 * grid +- 1 (the group's delta) are signed, so they take the signed dot,
with the scale / 8. TQ1_0 / TQ2_0: trits 0..2 from registers; the -1 comes
back as d * (the block's activation sum). Activations: quant.quantize_act's
(xq, xd, xs). The numpy twin is ref_linear.matmul_qact.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from modelc.kernels import iq_tables as tb
from modelc.kernels.half import half_to_float
from modelc.kernels.qdot import (
    bits_i8x32,
    dot_i8x32,
    dotu_i8x32,
    f16_at,
    fma_i32x8,
    halves_f32x8,
    hsum_f32x8,
    load_i8x32,
    prefetch,
    splat_f32x8,
    zeros_f32x8,
)
from modelc.kernels.qdot_grid import (
    grid_i8x32,
    signs_i8x32,
    tq1_0,
    tq1_1,
    tq1_2,
    tq1_3,
    tq1_4,
    tq1_5,
    tq1_6,
    tq1_7,
    u16_at,
    u32_at,
)
from modelc.kernels.quant_iq import IQ1_M, IQ1_S, IQ2_S, IQ2_XS, IQ2_XXS, IQ3_S, IQ3_XXS, TQ1_0, TQ2_0

_ROWS_PER_TASK = 16
PREFETCH_BYTES = 4096
"""Prefetch distance (bytes ahead in the row): these kernels spend more time per byte than Q4_K's."""

_G2XXS = np.ascontiguousarray(tb.IQ2XXS_GRID).view(np.uint64).reshape(-1)
_G2XS = np.ascontiguousarray(tb.IQ2XS_GRID).view(np.uint64).reshape(-1)
_G2S = np.ascontiguousarray(tb.IQ2S_GRID).view(np.uint64).reshape(-1)
_G3XXS = np.ascontiguousarray(tb.IQ3XXS_GRID).view(np.uint32).reshape(-1).astype(np.int64)
_G3S = np.ascontiguousarray(tb.IQ3S_GRID).view(np.uint32).reshape(-1).astype(np.int64)
_G1 = np.concatenate([8 * tb.IQ1S_GRID.astype(np.int16) + 1, 8 * tb.IQ1S_GRID.astype(np.int16) - 1])
_G1 = np.ascontiguousarray(_G1.astype(np.int8)).view(np.uint64).reshape(-1)
"""IQ1: 8 * grid + 1 for entries 0..2047, 8 * grid - 1 (the negative delta) from 2048 on."""
_KS = tb.KSIGNS.astype(np.int64)

_HALF = np.float32(0.5)
_QUARTER = np.float32(0.25)
_EIGHTH = np.float32(0.125)


@njit(cache=True, nogil=True, inline="always")
def _ks4(aux):
    """The 32 sign bits of four 7-bit KSIGNS indices packed in aux's low 28 bits."""
    return (
        _KS[aux & 127] | (_KS[(aux >> 7) & 127] << 8) | (_KS[(aux >> 14) & 127] << 16) | (_KS[(aux >> 21) & 127] << 24)
    )


@njit(cache=True, nogil=True, inline="always")
def _iq2xxs(acc, w, o, xq, xd, b):
    d = f16_at(w, o)
    for ib in range(8):
        a = o + 2 + 8 * ib
        q = u32_at(w, a)
        aux = u32_at(w, a + 4)
        g = grid_i8x32(_G2XXS[q & 255], _G2XXS[(q >> 8) & 255], _G2XXS[(q >> 16) & 255], _G2XXS[q >> 24])
        x = signs_i8x32(load_i8x32(xq, b * 256 + 32 * ib), _ks4(aux))
        s = d * np.float32(_HALF + np.float32(aux >> 28)) * _QUARTER
        acc = fma_i32x8(acc, dotu_i8x32(g, x), splat_f32x8(s * xd[8 * b + ib]))
    return acc


@njit(cache=True, nogil=True, inline="always")
def _scales16(w, o, d, xdb):
    """Two 4-bit scales d * (0.5 + s) / 4 of one byte, times the activation scale, as the 8 lanes' halves."""
    s = np.int64(w[o])
    return halves_f32x8(
        d * (_HALF + np.float32(s & 15)) * _QUARTER * xdb, d * (_HALF + np.float32(s >> 4)) * _QUARTER * xdb
    )


@njit(cache=True, nogil=True, inline="always")
def _iq2xs(acc, w, o, xq, xd, b):
    d = f16_at(w, o)
    for ib in range(8):
        lo = u32_at(w, o + 2 + 8 * ib)
        hi = u32_at(w, o + 6 + 8 * ib)
        v0, v1, v2, v3 = lo & 0xFFFF, lo >> 16, hi & 0xFFFF, hi >> 16
        g = grid_i8x32(_G2XS[v0 & 511], _G2XS[v1 & 511], _G2XS[v2 & 511], _G2XS[v3 & 511])
        sb = _KS[v0 >> 9] | (_KS[v1 >> 9] << 8) | (_KS[v2 >> 9] << 16) | (_KS[v3 >> 9] << 24)
        x = signs_i8x32(load_i8x32(xq, b * 256 + 32 * ib), sb)
        acc = fma_i32x8(acc, dotu_i8x32(g, x), _scales16(w, o + 66 + ib, d, xd[8 * b + ib]))
    return acc


@njit(cache=True, nogil=True, inline="always")
def _iq2s(acc, w, o, xq, xd, b):
    d = f16_at(w, o)
    for ib in range(8):
        q = u32_at(w, o + 2 + 4 * ib)
        qh = np.int64(w[o + 66 + ib])
        g = grid_i8x32(
            _G2S[(q & 255) | ((qh & 3) << 8)],
            _G2S[((q >> 8) & 255) | ((qh & 12) << 6)],
            _G2S[((q >> 16) & 255) | ((qh & 48) << 4)],
            _G2S[(q >> 24) | ((qh & 192) << 2)],
        )
        x = signs_i8x32(load_i8x32(xq, b * 256 + 32 * ib), u32_at(w, o + 34 + 4 * ib))
        acc = fma_i32x8(acc, dotu_i8x32(g, x), _scales16(w, o + 74 + ib, d, xd[8 * b + ib]))
    return acc


@njit(cache=True, nogil=True, inline="always")
def _pair3(grid, i0, i1):
    """Two 4-value IQ3 grid rows as one 64-bit word."""
    return grid[i0] | (grid[i1] << 32)


@njit(cache=True, nogil=True, inline="always")
def _iq3xxs(acc, w, o, xq, xd, b):
    d = f16_at(w, o)
    for ib in range(8):
        lo = u32_at(w, o + 2 + 8 * ib)
        hi = u32_at(w, o + 6 + 8 * ib)
        aux = u32_at(w, o + 66 + 4 * ib)
        g = grid_i8x32(
            _pair3(_G3XXS, lo & 255, (lo >> 8) & 255),
            _pair3(_G3XXS, (lo >> 16) & 255, lo >> 24),
            _pair3(_G3XXS, hi & 255, (hi >> 8) & 255),
            _pair3(_G3XXS, (hi >> 16) & 255, hi >> 24),
        )
        x = signs_i8x32(load_i8x32(xq, b * 256 + 32 * ib), _ks4(aux))
        s = d * np.float32(_HALF + np.float32(aux >> 28)) * _HALF
        acc = fma_i32x8(acc, dotu_i8x32(g, x), splat_f32x8(s * xd[8 * b + ib]))
    return acc


@njit(cache=True, nogil=True, inline="always")
def _iq3s(acc, w, o, xq, xd, b):
    d = f16_at(w, o)
    for ib in range(8):
        lo = u32_at(w, o + 2 + 8 * ib)
        hi = u32_at(w, o + 6 + 8 * ib)
        qh = np.int64(w[o + 66 + ib])
        g = grid_i8x32(
            _pair3(_G3S, (lo & 255) | ((qh & 1) << 8), ((lo >> 8) & 255) | ((qh & 2) << 7)),
            _pair3(_G3S, ((lo >> 16) & 255) | ((qh & 4) << 6), (lo >> 24) | ((qh & 8) << 5)),
            _pair3(_G3S, (hi & 255) | ((qh & 16) << 4), ((hi >> 8) & 255) | ((qh & 32) << 3)),
            _pair3(_G3S, ((hi >> 16) & 255) | ((qh & 64) << 2), (hi >> 24) | ((qh & 128) << 1)),
        )
        x = signs_i8x32(load_i8x32(xq, b * 256 + 32 * ib), u32_at(w, o + 74 + 4 * ib))
        ls = (np.int64(w[o + 106 + ib // 2]) >> (4 * (ib % 2))) & 15
        acc = fma_i32x8(acc, dotu_i8x32(g, x), splat_f32x8(d * np.float32(1 + 2 * ls) * xd[8 * b + ib]))
    return acc


@njit(cache=True, nogil=True, inline="always")
def _iq1s(acc, w, o, xq, xd, b):
    d = f16_at(w, o)
    for ib in range(8):
        q = u32_at(w, o + 2 + 4 * ib)
        qh = u16_at(w, o + 34 + 2 * ib)
        neg = (qh & 0x8000) >> 4  # 2048: the negative-delta half of _G1
        g = grid_i8x32(
            _G1[(q & 255) | ((qh & 7) << 8) | neg],
            _G1[((q >> 8) & 255) | ((qh & 0x38) << 5) | neg],
            _G1[((q >> 16) & 255) | ((qh & 0x1C0) << 2) | neg],
            _G1[(q >> 24) | ((qh & 0xE00) >> 1) | neg],
        )
        s = d * np.float32(2 * ((qh >> 12) & 7) + 1) * _EIGHTH
        acc = fma_i32x8(acc, dot_i8x32(g, load_i8x32(xq, b * 256 + 32 * ib)), splat_f32x8(s * xd[8 * b + ib]))
    return acc


@njit(cache=True, nogil=True, inline="always")
def _g1m(q, nib):
    """IQ1_M group: grid byte q, 4-bit nibble (3 high index bits, delta sign) -> _G1 entry."""
    return _G1[q | ((nib & 7) << 8) | ((nib & 8) << 8)]


@njit(cache=True, nogil=True, inline="always")
def _iq1m(acc, w, o, xq, xd, b):
    s0, s1, s2, s3 = u16_at(w, o + 48), u16_at(w, o + 50), u16_at(w, o + 52), u16_at(w, o + 54)
    d = half_to_float(np.uint16((s0 >> 12) | ((s1 >> 8) & 0xF0) | ((s2 >> 4) & 0xF00) | (s3 & 0xF000)))
    for ib in range(8):
        q = u32_at(w, o + 4 * ib)
        qh = u16_at(w, o + 32 + 2 * ib)
        g = grid_i8x32(
            _g1m(q & 255, qh & 15),
            _g1m((q >> 8) & 255, (qh >> 4) & 15),
            _g1m((q >> 16) & 255, (qh >> 8) & 15),
            _g1m(q >> 24, qh >> 12),
        )
        sw = u16_at(w, o + 48 + 2 * (ib // 2)) >> (6 * (ib % 2))
        xdb = xd[8 * b + ib] * d * _EIGHTH
        f = halves_f32x8(np.float32(2 * (sw & 7) + 1) * xdb, np.float32(2 * ((sw >> 3) & 7) + 1) * xdb)
        acc = fma_i32x8(acc, dot_i8x32(g, load_i8x32(xq, b * 256 + 32 * ib)), f)
    return acc


@njit(cache=True, nogil=True, inline="always")
def _tq2(acc, w, o, xq, xd, b):
    d = f16_at(w, o + 64)
    for k in range(8):  # element 128h + 32s + l = (qs[32h + l] >> 2s) & 3, k = 4h + s
        q = bits_i8x32(w, o + (k // 4) * 32, 2 * (k % 4), 3)
        acc = fma_i32x8(acc, dotu_i8x32(q, load_i8x32(xq, b * 256 + 32 * k)), splat_f32x8(d * xd[8 * b + k]))
    return acc


@njit(cache=True, nogil=True, inline="always")
def _tq1(acc, w, o, xq, xd, b):
    d = f16_at(w, o + 52)
    x0 = b * 256
    e = 8 * b
    acc = fma_i32x8(acc, dotu_i8x32(tq1_0(w, o), load_i8x32(xq, x0)), splat_f32x8(d * xd[e]))
    acc = fma_i32x8(acc, dotu_i8x32(tq1_1(w, o), load_i8x32(xq, x0 + 32)), splat_f32x8(d * xd[e + 1]))
    acc = fma_i32x8(acc, dotu_i8x32(tq1_2(w, o), load_i8x32(xq, x0 + 64)), splat_f32x8(d * xd[e + 2]))
    acc = fma_i32x8(acc, dotu_i8x32(tq1_3(w, o), load_i8x32(xq, x0 + 96)), splat_f32x8(d * xd[e + 3]))
    acc = fma_i32x8(acc, dotu_i8x32(tq1_4(w, o), load_i8x32(xq, x0 + 128)), splat_f32x8(d * xd[e + 4]))
    acc = fma_i32x8(acc, dotu_i8x32(tq1_5(w, o), load_i8x32(xq, x0 + 160)), splat_f32x8(d * xd[e + 5]))
    acc = fma_i32x8(acc, dotu_i8x32(tq1_6(w, o), load_i8x32(xq, x0 + 192)), splat_f32x8(d * xd[e + 6]))
    return fma_i32x8(acc, dotu_i8x32(tq1_7(w, o), load_i8x32(xq, x0 + 224)), splat_f32x8(d * xd[e + 7]))


@njit(cache=True, nogil=True, inline="always")
def _tsize(kind):
    if kind == IQ2_XXS or kind == TQ2_0:
        return 66
    if kind == IQ2_XS:
        return 74
    if kind == IQ2_S:
        return 82
    if kind == IQ3_XXS:
        return 98
    if kind == IQ3_S:
        return 110
    if kind == IQ1_S:
        return 50
    if kind == IQ1_M:
        return 56
    return 54  # TQ1_0


@njit(cache=True, nogil=True, inline="always")
def _row(kind, w, o, xq, xd, xsb, nb):
    """dot(row at byte o of w, the quantized activation) for a kind of this module (a constant after inlining)."""
    tsize = _tsize(kind)
    acc = zeros_f32x8()
    corr = np.float32(0.0)
    for b in range(nb):
        ob = o + b * tsize
        prefetch(w, ob + PREFETCH_BYTES)
        prefetch(w, ob + PREFETCH_BYTES + 64)
        if kind == IQ2_XXS:
            acc = _iq2xxs(acc, w, ob, xq, xd, b)
        elif kind == IQ2_XS:
            acc = _iq2xs(acc, w, ob, xq, xd, b)
        elif kind == IQ2_S:
            acc = _iq2s(acc, w, ob, xq, xd, b)
        elif kind == IQ3_XXS:
            acc = _iq3xxs(acc, w, ob, xq, xd, b)
        elif kind == IQ3_S:
            acc = _iq3s(acc, w, ob, xq, xd, b)
        elif kind == IQ1_S:
            acc = _iq1s(acc, w, ob, xq, xd, b)
        elif kind == IQ1_M:
            acc = _iq1m(acc, w, ob, xq, xd, b)
        elif kind == TQ2_0:
            acc = _tq2(acc, w, ob, xq, xd, b)
            corr += f16_at(w, ob + 64) * xsb[b]
        else:
            acc = _tq1(acc, w, ob, xq, xd, b)
            corr += f16_at(w, ob + 52) * xsb[b]
    return hsum_f32x8(acc) - corr


@njit(cache=True, nogil=True, inline="always")
def _matvec(kind, out, xq, xd, xs, w):
    c = xq.shape[1]
    n, nbytes = w.shape
    nb = c // 256
    wf = w.reshape(-1)
    xqf = xq.reshape(-1)
    xdf = xd.reshape(-1)
    xsf = xs.reshape(-1)
    xsb = np.zeros(nb, np.float32)  # per 256-block activation sums: the ternary types' -1
    if kind == TQ1_0 or kind == TQ2_0:
        for k in range(c // 16):
            xsb[k // 16] += xsf[k]
    ntask = max(1, min(n, n // _ROWS_PER_TASK))
    for t in prange(ntask):
        for r in range(t * n // ntask, (t + 1) * n // ntask):
            out[0, r] = _row(kind, wf, r * nbytes, xqf, xdf, xsb, nb)


# One entry per kind (only the kinds a model has get compiled); each is _matvec with its kind a constant.
# Contract of each: out (1, N) f32 = one activation row (quant.quantize_act's xq (1, C) int8, xd (1, C/32),
# xs (1, C/16) f32) @ W.T; w (N, row_bytes) uint8 C-contig, C % 256 == 0. parallel=True over tasks of
# 16 output rows; the caller sets the thread count.


@njit(cache=True, nogil=True, parallel=True)
def qmatvec_iq2xxs(out, xq, xd, xs, w):
    _matvec(IQ2_XXS, out, xq, xd, xs, w)


@njit(cache=True, nogil=True, parallel=True)
def qmatvec_iq2xs(out, xq, xd, xs, w):
    _matvec(IQ2_XS, out, xq, xd, xs, w)


@njit(cache=True, nogil=True, parallel=True)
def qmatvec_iq2s(out, xq, xd, xs, w):
    _matvec(IQ2_S, out, xq, xd, xs, w)


@njit(cache=True, nogil=True, parallel=True)
def qmatvec_iq3xxs(out, xq, xd, xs, w):
    _matvec(IQ3_XXS, out, xq, xd, xs, w)


@njit(cache=True, nogil=True, parallel=True)
def qmatvec_iq3s(out, xq, xd, xs, w):
    _matvec(IQ3_S, out, xq, xd, xs, w)


@njit(cache=True, nogil=True, parallel=True)
def qmatvec_iq1s(out, xq, xd, xs, w):
    _matvec(IQ1_S, out, xq, xd, xs, w)


@njit(cache=True, nogil=True, parallel=True)
def qmatvec_iq1m(out, xq, xd, xs, w):
    _matvec(IQ1_M, out, xq, xd, xs, w)


@njit(cache=True, nogil=True, parallel=True)
def qmatvec_tq1(out, xq, xd, xs, w):
    _matvec(TQ1_0, out, xq, xd, xs, w)


@njit(cache=True, nogil=True, parallel=True)
def qmatvec_tq2(out, xq, xd, xs, w):
    _matvec(TQ2_0, out, xq, xd, xs, w)


KERNELS = {
    IQ2_XXS: qmatvec_iq2xxs,
    IQ2_XS: qmatvec_iq2xs,
    IQ2_S: qmatvec_iq2s,
    IQ3_XXS: qmatvec_iq3xxs,
    IQ3_S: qmatvec_iq3s,
    IQ1_S: qmatvec_iq1s,
    IQ1_M: qmatvec_iq1m,
    TQ1_0: qmatvec_tq1,
    TQ2_0: qmatvec_tq2,
}
KINDS = frozenset(KERNELS)
"""Kinds qmatvec_grid serves."""


def qmatvec_grid(out, xq, xd, xs, w, kind):
    """out (1, N) f32 = xq-form activation @ W.T for a kind in KINDS (the kernel of that kind)."""
    KERNELS[kind](out, xq, xd, xs, w)
