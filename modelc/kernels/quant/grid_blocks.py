"""Per-type decoders of the grid i-quants and the ternary types, for gemm_fused_grid.

`sub(kind, w, o, ib)` reads sub-block ib of the 256-weight block at byte o of w and returns (weights,
sign bits, scale of elements 0-15, scale of 16-31): IQ2_* / IQ3_* give unsigned grid values joined in
a register from scalar lookups (qdot_grid.grid_i8x32) with their 32 sign bits apart; IQ1_* give the
signed values 8 * grid +- 1 (the group's delta) with the scale / 8, exactly as quant_iq unpacks them;
TQ1_0 / TQ2_0 give trits 0..2 (the -1 is the kernel's: d times the block's activation sum). The kernel
works on pairs of sub-blocks: `prep` gives a block's 256 sign bits and its 16 half-sub-block scales as
vectors once, `grid2` two sub-blocks' weights side by side (64 bytes), `dot2` their 512-bit int8 dot
with the signs put on the activations. All inline="always" with the kind a constant after inlining, so
each kernel keeps only its own type's branch. Layouts: ref_iquant.py.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from modelc.kernels.quant import iq_tables as tb
from modelc.kernels.quant.quant_iq import IQ1_M, IQ1_S, IQ2_S, IQ2_XS, IQ2_XXS, IQ3_S, IQ3_XXS, TQ1_0, TQ2_0
from modelc.kernels.simd.half import half_to_float
from modelc.kernels.simd.qdot import add_f32x16, bits_i8x32, f16_at, load_i8x32, mul_f32x16
from modelc.kernels.simd.qdot import splat_f32x16 as splat
from modelc.kernels.simd.qdot_grid import (
    aux4_scales_f32x16,
    aux4_signs_i8x32,
    aux8_scales_f32x16,
    aux8_signs_i8x32,
    grid_i8x32,
    iq1m_scales_f32x16,
    iq1s_scales_f32x16,
    join_i8x64,
    nib8_f32x16,
    nib16_f32x16,
    signs_i8x64,
    tq1_5,
    tq1_6,
    tq1_7,
    trits_i8x32,
    u16_at,
    u32_at,
    xs_signs_i8x32,
    zeros_i8x32,
)
from modelc.kernels.simd.qdot_tile import dot_u8x64, load_i8x64, sdot_i8x64, zeros_i32x16

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
def _iq2xxs(w, o, ib):
    a = o + 2 + 8 * ib
    q = u32_at(w, a)
    aux = u32_at(w, a + 4)
    g = grid_i8x32(_G2XXS[q & 255], _G2XXS[(q >> 8) & 255], _G2XXS[(q >> 16) & 255], _G2XXS[q >> 24])
    s = f16_at(w, o) * np.float32(_HALF + np.float32(aux >> 28)) * _QUARTER
    return g, _ks4(aux), s, s


@njit(cache=True, nogil=True, inline="always")
def _scales16(w, o, d):
    """The two 4-bit scales d * (0.5 + s) / 4 of byte o (the 16-element halves of a sub-block)."""
    s = np.int64(w[o])
    return d * (_HALF + np.float32(s & 15)) * _QUARTER, d * (_HALF + np.float32(s >> 4)) * _QUARTER


@njit(cache=True, nogil=True, inline="always")
def _iq2xs(w, o, ib):
    lo = u32_at(w, o + 2 + 8 * ib)
    hi = u32_at(w, o + 6 + 8 * ib)
    v0, v1, v2, v3 = lo & 0xFFFF, lo >> 16, hi & 0xFFFF, hi >> 16
    g = grid_i8x32(_G2XS[v0 & 511], _G2XS[v1 & 511], _G2XS[v2 & 511], _G2XS[v3 & 511])
    sb = _KS[v0 >> 9] | (_KS[v1 >> 9] << 8) | (_KS[v2 >> 9] << 16) | (_KS[v3 >> 9] << 24)
    fa, fb = _scales16(w, o + 66 + ib, f16_at(w, o))
    return g, sb, fa, fb


@njit(cache=True, nogil=True, inline="always")
def _iq2s(w, o, ib):
    q = u32_at(w, o + 2 + 4 * ib)
    qh = np.int64(w[o + 66 + ib])
    g = grid_i8x32(
        _G2S[(q & 255) | ((qh & 3) << 8)],
        _G2S[((q >> 8) & 255) | ((qh & 12) << 6)],
        _G2S[((q >> 16) & 255) | ((qh & 48) << 4)],
        _G2S[(q >> 24) | ((qh & 192) << 2)],
    )
    fa, fb = _scales16(w, o + 74 + ib, f16_at(w, o))
    return g, u32_at(w, o + 34 + 4 * ib), fa, fb


@njit(cache=True, nogil=True, inline="always")
def _pair3(grid, i0, i1):
    """Two 4-value IQ3 grid rows as one 64-bit word."""
    return grid[i0] | (grid[i1] << 32)


@njit(cache=True, nogil=True, inline="always")
def _iq3xxs(w, o, ib):
    lo = u32_at(w, o + 2 + 8 * ib)
    hi = u32_at(w, o + 6 + 8 * ib)
    aux = u32_at(w, o + 66 + 4 * ib)
    g = grid_i8x32(
        _pair3(_G3XXS, lo & 255, (lo >> 8) & 255),
        _pair3(_G3XXS, (lo >> 16) & 255, lo >> 24),
        _pair3(_G3XXS, hi & 255, (hi >> 8) & 255),
        _pair3(_G3XXS, (hi >> 16) & 255, hi >> 24),
    )
    s = f16_at(w, o) * np.float32(_HALF + np.float32(aux >> 28)) * _HALF
    return g, _ks4(aux), s, s


@njit(cache=True, nogil=True, inline="always")
def _iq3s(w, o, ib):
    lo = u32_at(w, o + 2 + 8 * ib)
    hi = u32_at(w, o + 6 + 8 * ib)
    qh = np.int64(w[o + 66 + ib])
    g = grid_i8x32(
        _pair3(_G3S, (lo & 255) | ((qh & 1) << 8), ((lo >> 8) & 255) | ((qh & 2) << 7)),
        _pair3(_G3S, ((lo >> 16) & 255) | ((qh & 4) << 6), (lo >> 24) | ((qh & 8) << 5)),
        _pair3(_G3S, (hi & 255) | ((qh & 16) << 4), ((hi >> 8) & 255) | ((qh & 32) << 3)),
        _pair3(_G3S, ((hi >> 16) & 255) | ((qh & 64) << 2), (hi >> 24) | ((qh & 128) << 1)),
    )
    ls = (np.int64(w[o + 106 + ib // 2]) >> (4 * (ib % 2))) & 15
    s = f16_at(w, o) * np.float32(1 + 2 * ls)
    return g, u32_at(w, o + 74 + 4 * ib), s, s


@njit(cache=True, nogil=True, inline="always")
def _iq1s(w, o, ib):
    q = u32_at(w, o + 2 + 4 * ib)
    qh = u16_at(w, o + 34 + 2 * ib)
    neg = (qh & 0x8000) >> 4  # 2048: the negative-delta half of _G1
    g = grid_i8x32(
        _G1[(q & 255) | ((qh & 7) << 8) | neg],
        _G1[((q >> 8) & 255) | ((qh & 0x38) << 5) | neg],
        _G1[((q >> 16) & 255) | ((qh & 0x1C0) << 2) | neg],
        _G1[(q >> 24) | ((qh & 0xE00) >> 1) | neg],
    )
    s = f16_at(w, o) * np.float32(2 * ((qh >> 12) & 7) + 1) * _EIGHTH
    return g, np.int64(0), s, s


@njit(cache=True, nogil=True, inline="always")
def _g1m(q, nib):
    """IQ1_M group: grid byte q, 4-bit nibble (3 high index bits, delta sign) -> _G1 entry."""
    return _G1[q | ((nib & 7) << 8) | ((nib & 8) << 8)]


@njit(cache=True, nogil=True, inline="always")
def _iq1m_d(w, o):
    """IQ1_M's block scale: an fp16 kept in the top nibbles of its four scale words."""
    s0, s1, s2, s3 = u16_at(w, o + 48), u16_at(w, o + 50), u16_at(w, o + 52), u16_at(w, o + 54)
    return half_to_float(np.uint16((s0 >> 12) | ((s1 >> 8) & 0xF0) | ((s2 >> 4) & 0xF00) | (s3 & 0xF000)))


@njit(cache=True, nogil=True, inline="always")
def _iq1m(w, o, ib):
    q = u32_at(w, o + 4 * ib)
    qh = u16_at(w, o + 32 + 2 * ib)
    g = grid_i8x32(
        _g1m(q & 255, qh & 15),
        _g1m((q >> 8) & 255, (qh >> 4) & 15),
        _g1m((q >> 16) & 255, (qh >> 8) & 15),
        _g1m(q >> 24, qh >> 12),
    )
    sw = u16_at(w, o + 48 + 2 * (ib // 2)) >> (6 * (ib % 2))
    d = _iq1m_d(w, o) * _EIGHTH
    return g, np.int64(0), np.float32(2 * (sw & 7) + 1) * d, np.float32(2 * ((sw >> 3) & 7) + 1) * d


_P3 = np.array([1, 3, 9, 27, 81], np.int64)


@njit(cache=True, nogil=True, inline="always")
def _tq1(w, o, ib):
    if ib < 5:
        g = trits_i8x32(w, o, _P3[ib])
    elif ib == 5:
        g = tq1_5(w, o)
    elif ib == 6:
        g = tq1_6(w, o)
    else:
        g = tq1_7(w, o)
    d = f16_at(w, o + 52)
    return g, np.int64(0), d, d


@njit(cache=True, nogil=True, inline="always")
def _tq2(w, o, ib):
    # element 128h + 32s + l = (qs[32h + l] >> 2s) & 3, sub-block ib = 4h + s
    d = f16_at(w, o + 64)
    return bits_i8x32(w, o + (ib // 4) * 32, 2 * (ib % 4), 3), np.int64(0), d, d


@njit(cache=True, nogil=True, inline="always")
def sub(kind, w, o, ib):
    """Sub-block ib (32 weights) of the kind's block at byte o: (weights I8x32, sign bits, scale of elements
    0-15, scale of 16-31). Weights: unsigned grid values (signs in the bits), IQ1's signed 8 * grid +- 1,
    or the ternary types' trits 0..2."""
    if kind == IQ2_XXS:
        return _iq2xxs(w, o, ib)
    if kind == IQ2_XS:
        return _iq2xs(w, o, ib)
    if kind == IQ2_S:
        return _iq2s(w, o, ib)
    if kind == IQ3_XXS:
        return _iq3xxs(w, o, ib)
    if kind == IQ3_S:
        return _iq3s(w, o, ib)
    if kind == IQ1_S:
        return _iq1s(w, o, ib)
    if kind == IQ1_M:
        return _iq1m(w, o, ib)
    if kind == TQ2_0:
        return _tq2(w, o, ib)
    return _tq1(w, o, ib)


@njit(cache=True, nogil=True, inline="always")
def prep(kind, w, o):
    """The block at byte o as vectors: (its 256 sign bits, I8x32, zero for the kinds without; the scales of its
    16 half sub-blocks, F32x16, lane 2j + h: elements 16h .. 16h + 15 of sub-block j), the same values sub()
    computes one sub-block at a time."""
    if kind == IQ2_XXS:
        return aux8_signs_i8x32(w, o + 6), mul_f32x16(add_f32x16(aux8_scales_f32x16(w, o + 6), splat(_HALF)),
                                                      splat(f16_at(w, o) * _QUARTER))  # fmt: skip
    if kind == IQ2_XS:
        return xs_signs_i8x32(w, o + 2), mul_f32x16(add_f32x16(nib16_f32x16(w, o + 66), splat(_HALF)),
                                                    splat(f16_at(w, o) * _QUARTER))  # fmt: skip
    if kind == IQ2_S:
        return load_i8x32(w, o + 34), mul_f32x16(add_f32x16(nib16_f32x16(w, o + 74), splat(_HALF)),
                                                 splat(f16_at(w, o) * _QUARTER))  # fmt: skip
    if kind == IQ3_XXS:
        return aux4_signs_i8x32(w, o + 66), mul_f32x16(add_f32x16(aux4_scales_f32x16(w, o + 66), splat(_HALF)),
                                                       splat(f16_at(w, o) * _HALF))  # fmt: skip
    if kind == IQ3_S:
        ls = nib8_f32x16(w, o + 106)
        return load_i8x32(w, o + 74), mul_f32x16(add_f32x16(add_f32x16(ls, ls), splat(np.float32(1.0))),
                                                 splat(f16_at(w, o)))  # fmt: skip
    if kind == IQ1_S:
        return zeros_i8x32(), mul_f32x16(iq1s_scales_f32x16(w, o + 34), splat(f16_at(w, o) * _EIGHTH))
    if kind == IQ1_M:
        return zeros_i8x32(), mul_f32x16(iq1m_scales_f32x16(w, o + 48), splat(_iq1m_d(w, o) * _EIGHTH))
    return zeros_i8x32(), splat(ternary_d(kind, w, o))


@njit(cache=True, nogil=True, inline="always")
def grid2(kind, w, o, ib):
    """The weights of sub-blocks ib, ib + 1 of the block at byte o side by side (I8x64; what sub() builds)."""
    g0 = g1 = zeros_i8x32()
    for h in range(2):  # one call site: sub() inlines once (numba inlines every type's branch before pruning)
        g = sub(kind, w, o, ib + h)[0]
        if h == 0:
            g0 = g
        else:
            g1 = g
    return join_i8x64(g0, g1)


@njit(cache=True, nogil=True, inline="always")
def dot2(kind, g, sb, xq, xo):
    """The int8 dot of a pair's weights with xq[xo:xo+64] (I32x16, lane k: elements 4k..4k+3)."""
    x = load_i8x64(xq, xo)
    if kind == IQ1_S or kind == IQ1_M:
        return sdot_i8x64(zeros_i32x16(), g, x)
    if kind == TQ1_0 or kind == TQ2_0:
        return dot_u8x64(zeros_i32x16(), g, x)
    return dot_u8x64(zeros_i32x16(), g, signs_i8x64(x, sb))


@njit(cache=True, nogil=True, inline="always")
def ternary_d(kind, w, o):
    return f16_at(w, o + (64 if kind == TQ2_0 else 52))


@njit(cache=True, nogil=True, inline="always")
def tsize(kind):
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
