"""Unpack i-quant, MXFP4 and ternary rows to quant.py's normalized form w = sc[i//16] * q[i] - mn[i//16].

IQ4_NL, IQ4_XS, MXFP4: q = the code book value (int8, signed), sc = the block
(or sub-block) scale; the nibbles go through one vpshufb (qdot_iq). IQ2_*,
IQ3_*: q = grid value times its sign (|q| <= 62), sc = the sub-block scale.
IQ1_S / IQ1_M: q = 8 * grid + the group's delta sign (values in -9..9), sc =
the scale / 8, so sc * q = scale * (grid +- 1/8) exactly. TQ1_0 / TQ2_0: q =
the stored trit (unsigned 0..2), sc = mn = d. Q1_0: q = the sign bit (0/1), sc = 2d, mn = d
(w = +-d); Q2_0: q = the 2-bit code (0..3), sc = mn = d (w = (code - 1) d). mn is 0 for every signed kind.
Layouts: ref_iquant.py (the numpy twins); tables: iq_tables.py.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from modelc.kernels.quant import iq_tables as tb
from modelc.kernels.reference.ref_iquant import e8m0_half
from modelc.kernels.simd.half import half_to_float
from modelc.kernels.simd.qdot import bits_i8x32, f16_at, store_i8x32
from modelc.kernels.simd.qdot_iq import iq4nl_i8x32, mxfp4_i8x32

# kind codes (quant.KIND), in one place so quant.py and the kernels agree
IQ4_NL, IQ4_XS, MXFP4, TQ1_0, TQ2_0, IQ3_S, IQ3_XXS, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M = range(13, 25)
Q1_0, Q2_0 = 25, 26
FIRST_KIND = IQ4_NL
UNSIGNED_KINDS = (TQ1_0, TQ2_0, Q1_0, Q2_0)

_KS = np.ascontiguousarray(tb.KSIGNS)
E8M0_HALF = e8m0_half(np.arange(256, dtype=np.uint32)).astype(np.float32)  # (256,) MXFP4 scale byte -> float
_POW3 = np.array([1, 3, 9, 27, 81], np.int64)

# The grids as one uint64 (8 values) or uint32 (4 values) per entry, and per sign byte the mask with
# 0xFF in each negated byte: a group of signed grid values is then one load, xor, add and store
# ((g ^ m) + (m & 0x01..01) negates the masked bytes; grid values are 1..62, so no byte carries).
_G2XXS64 = np.ascontiguousarray(tb.IQ2XXS_GRID).view(np.uint64).reshape(-1)
_G2XS64 = np.ascontiguousarray(tb.IQ2XS_GRID).view(np.uint64).reshape(-1)
_G2S64 = np.ascontiguousarray(tb.IQ2S_GRID).view(np.uint64).reshape(-1)
_G3XXS32 = np.ascontiguousarray(tb.IQ3XXS_GRID).view(np.uint32).reshape(-1)
_G3S32 = np.ascontiguousarray(tb.IQ3S_GRID).view(np.uint32).reshape(-1)
_G1P64 = np.ascontiguousarray(8 * tb.IQ1S_GRID.astype(np.int8) + 1).astype(np.int8).view(np.uint64).reshape(-1)
_G1N64 = np.ascontiguousarray(8 * tb.IQ1S_GRID.astype(np.int8) - 1).astype(np.int8).view(np.uint64).reshape(-1)
_SMASK64 = np.array([sum(0xFF << (8 * j) for j in range(8) if (i >> j) & 1) for i in range(256)], np.uint64)
_SMASK32 = _SMASK64[:16].astype(np.uint32)
_ONES64 = np.uint64(0x0101010101010101)
_ONES32 = np.uint32(0x01010101)

_HALF = np.float32(0.5)
_QUARTER = np.float32(0.25)
_EIGHTH = np.float32(0.125)


@njit(cache=True, nogil=True, inline="always")
def _u16(row, o):
    return np.int64(row[o]) | (np.int64(row[o + 1]) << 8)


@njit(cache=True, nogil=True, inline="always")
def _u32(row, o):
    return _u16(row, o) | (_u16(row, o + 2) << 16)


@njit(cache=True, nogil=True, inline="always")
def _set(sc, mn, g, s0, s1):
    """Scales of the two 16-element halves of sub-block g // 2 (g even), mn = 0."""
    sc[g] = s0
    sc[g + 1] = s1
    mn[g] = np.float32(0.0)
    mn[g + 1] = np.float32(0.0)


@njit(cache=True, nogil=True, inline="always")
def _put8(q64, k, grid64, gi, signs):
    """q bytes 8k..8k+7 = grid entry gi (8 values), value j negated where bit j of signs (a byte) is set."""
    m = _SMASK64[signs]
    q64[k] = (grid64[gi] ^ m) + (m & _ONES64)


@njit(cache=True, nogil=True, inline="always")
def _put4(q32, k, grid32, gi, signs4):
    """q bytes 4k..4k+3 = grid entry gi (4 values), value j negated where bit j of signs4 (0..15) is set."""
    m = _SMASK32[signs4]
    q32[k] = (grid32[gi] ^ m) + (m & _ONES32)


@njit(cache=True, nogil=True, inline="always")
def _iq4(kind, q, sc, mn, row, base):
    c = q.shape[0]
    if kind == IQ4_NL or kind == MXFP4:
        tsize = 18 if kind == IQ4_NL else 17
        for b in range(c // 32):
            o = base + b * tsize
            if kind == IQ4_NL:
                d = f16_at(row, o)
                store_i8x32(q, b * 32, iq4nl_i8x32(row, o + 2))
            else:
                d = E8M0_HALF[row[o]]
                store_i8x32(q, b * 32, mxfp4_i8x32(row, o + 1))
            _set(sc, mn, 2 * b, d, d)
        return
    for b in range(c // 256):
        o = base + b * 136
        d = f16_at(row, o)
        sh = _u16(row, o + 2)
        for ib in range(8):
            ls = ((np.int64(row[o + 4 + ib // 2]) >> (4 * (ib % 2))) & 15) | (((sh >> (2 * ib)) & 3) << 4)
            dl = d * np.float32(ls - 32)
            store_i8x32(q, b * 256 + ib * 32, iq4nl_i8x32(row, o + 8 + 16 * ib))
            _set(sc, mn, b * 16 + 2 * ib, dl, dl)


@njit(cache=True, nogil=True, inline="always")
def _ternary(kind, q, sc, mn, row, base):
    c = q.shape[0]
    for b in range(c // 256):
        if kind == TQ2_0:
            o = base + b * 66
            d = f16_at(row, o + 64)
            for k in range(8):  # element h*128 + s*32 + l = (qs[h*32 + l] >> 2s) & 3
                store_i8x32(q, b * 256 + k * 32, bits_i8x32(row, o + (k // 4) * 32, 2 * (k % 4), 3))
        else:
            o = base + b * 54
            d = f16_at(row, o + 52)
            qo = b * 256
            for m in range(32):  # byte m holds elements m, 32 + m, ..., 128 + m (one load, five trits)
                v = np.int64(row[o + m])
                for n in range(5):
                    q[qo + n * 32 + m] = (((v * _POW3[n]) & 255) * 3) >> 8
            for m in range(16):
                v = np.int64(row[o + 32 + m])
                for n in range(5):
                    q[qo + 160 + n * 16 + m] = (((v * _POW3[n]) & 255) * 3) >> 8
            for m in range(4):
                v = np.int64(row[o + 48 + m])
                for n in range(4):
                    q[qo + 240 + n * 4 + m] = (((v * _POW3[n]) & 255) * 3) >> 8
        for g in range(16):
            sc[b * 16 + g] = d
            mn[b * 16 + g] = d


@njit(cache=True, nogil=True, inline="always")
def _iq2(kind, q, q64, sc, mn, row, base):
    c = q.shape[0]
    tsize = 66 if kind == IQ2_XXS else (74 if kind == IQ2_XS else 82)
    for b in range(c // 256):
        o = base + b * tsize
        d = f16_at(row, o)
        for ib in range(8):
            qo = b * 256 + ib * 32
            if kind == IQ2_XXS:
                a = o + 2 + 8 * ib
                aux = _u32(row, a + 4)
                db = d * (_HALF + np.float32(aux >> 28)) * _QUARTER
                _set(sc, mn, b * 16 + 2 * ib, db, db)
                for l in range(4):
                    _put8(q64, qo // 8 + l, _G2XXS64, np.int64(row[a + l]), _KS[(aux >> (7 * l)) & 127])
                continue
            s = np.int64(row[o + (66 if kind == IQ2_XS else 74) + ib])
            _set(
                sc,
                mn,
                b * 16 + 2 * ib,
                d * (_HALF + np.float32(s & 15)) * _QUARTER,
                d * (_HALF + np.float32(s >> 4)) * _QUARTER,
            )
            for l in range(4):
                if kind == IQ2_XS:
                    v = _u16(row, o + 2 + 8 * ib + 2 * l)
                    _put8(q64, qo // 8 + l, _G2XS64, v & 511, _KS[v >> 9])
                else:
                    gi = np.int64(row[o + 2 + 4 * ib + l]) | (((np.int64(row[o + 66 + ib]) >> (2 * l)) & 3) << 8)
                    _put8(q64, qo // 8 + l, _G2S64, gi, row[o + 34 + 4 * ib + l])


@njit(cache=True, nogil=True, inline="always")
def _iq3(kind, q, q32, sc, mn, row, base):
    c = q.shape[0]
    tsize = 98 if kind == IQ3_XXS else 110
    for b in range(c // 256):
        o = base + b * tsize
        d = f16_at(row, o)
        for ib in range(8):
            qo = b * 256 + ib * 32
            a = o + 2 + 8 * ib
            if kind == IQ3_XXS:
                aux = _u32(row, o + 66 + 4 * ib)
                db = d * (_HALF + np.float32(aux >> 28)) * _HALF
                _set(sc, mn, b * 16 + 2 * ib, db, db)
                for l in range(4):
                    s = np.int64(_KS[(aux >> (7 * l)) & 127])
                    _put4(q32, qo // 4 + 2 * l, _G3XXS32, np.int64(row[a + 2 * l]), s & 15)
                    _put4(q32, qo // 4 + 2 * l + 1, _G3XXS32, np.int64(row[a + 2 * l + 1]), s >> 4)
                continue
            ls = (np.int64(row[o + 106 + ib // 2]) >> (4 * (ib % 2))) & 15
            db = d * np.float32(1 + 2 * ls)
            _set(sc, mn, b * 16 + 2 * ib, db, db)
            qh = np.int64(row[o + 66 + ib])
            for l in range(4):
                s = np.int64(row[o + 74 + 4 * ib + l])
                g1 = np.int64(row[a + 2 * l]) | (((qh >> (2 * l)) & 1) << 8)
                g2 = np.int64(row[a + 2 * l + 1]) | (((qh >> (2 * l + 1)) & 1) << 8)
                _put4(q32, qo // 4 + 2 * l, _G3S32, g1, s & 15)
                _put4(q32, qo // 4 + 2 * l + 1, _G3S32, g2, s >> 4)


@njit(cache=True, nogil=True, inline="always")
def _grid1(q64, k, gi, neg):
    """q bytes 8k..8k+7 = 8 * iq1s_grid[gi] + (-1 if neg else +1)."""
    q64[k] = _G1N64[gi] if neg else _G1P64[gi]


@njit(cache=True, nogil=True, inline="always")
def _iq1(kind, q, q64, sc, mn, row, base):
    c = q.shape[0]
    for b in range(c // 256):
        if kind == IQ1_S:
            o = base + b * 50
            d = f16_at(row, o)
            for ib in range(8):
                qh = _u16(row, o + 34 + 2 * ib)
                dl = d * np.float32(2 * ((qh >> 12) & 7) + 1) * _EIGHTH
                _set(sc, mn, b * 16 + 2 * ib, dl, dl)
                for l in range(4):
                    gi = np.int64(row[o + 2 + 4 * ib + l]) | (((qh >> (3 * l)) & 7) << 8)
                    _grid1(q64, b * 32 + ib * 4 + l, gi, (qh & 0x8000) != 0)
            continue
        o = base + b * 56
        w0, w1, w2, w3 = _u16(row, o + 48), _u16(row, o + 50), _u16(row, o + 52), _u16(row, o + 54)
        bits = (w0 >> 12) | ((w1 >> 8) & 0xF0) | ((w2 >> 4) & 0xF00) | (w3 & 0xF000)
        d = half_to_float(np.uint16(bits))
        for ib in range(8):
            sw = _u16(row, o + 48 + 2 * (ib // 2)) >> (6 * (ib % 2))
            d1 = d * np.float32(2 * (sw & 7) + 1) * _EIGHTH
            d2 = d * np.float32(2 * ((sw >> 3) & 7) + 1) * _EIGHTH
            _set(sc, mn, b * 16 + 2 * ib, d1, d2)
            for l in range(4):
                nib = (np.int64(row[o + 32 + 2 * ib + l // 2]) >> (4 * (l % 2))) & 15
                gi = np.int64(row[o + 4 * ib + l]) | ((nib & 7) << 8)
                _grid1(q64, b * 32 + ib * 4 + l, gi, (nib & 8) != 0)


@njit(cache=True, nogil=True, inline="always")
def _low_bit(kind, q, sc, mn, row, base):
    """Q1_0 (128 per block: F16 d, 16 bytes of bits, element j = bit j % 8 of byte j // 8) and Q2_0 (64 per
    block: F16 d, 16 bytes, element j = bits 2(j % 4) of byte j // 4)."""
    c = q.shape[0]
    if kind == Q1_0:
        for b in range(c // 128):
            o = base + b * 18
            d = f16_at(row, o)
            for j in range(128):
                q[b * 128 + j] = (row[o + 2 + j // 8] >> (j % 8)) & 1
            for g in range(8):
                sc[b * 8 + g] = d + d
                mn[b * 8 + g] = d
    else:
        for b in range(c // 64):
            o = base + b * 18
            d = f16_at(row, o)
            for j in range(64):
                q[b * 64 + j] = (row[o + 2 + j // 4] >> (2 * (j % 4))) & 3
            for g in range(4):
                sc[b * 4 + g] = d
                mn[b * 4 + g] = d


@njit(cache=True, nogil=True)
def unpack_iq(kind, q, sc, mn, row, base):
    """One stored row of an i-quant / MXFP4 / ternary kind (quant.unpack_row's contract)."""
    if kind == IQ4_NL or kind == IQ4_XS or kind == MXFP4:
        _iq4(kind, q, sc, mn, row, base)
    elif kind == TQ1_0 or kind == TQ2_0:
        _ternary(kind, q, sc, mn, row, base)
    elif kind == Q1_0 or kind == Q2_0:
        _low_bit(kind, q, sc, mn, row, base)
    elif kind == IQ2_XXS or kind == IQ2_XS or kind == IQ2_S:
        _iq2(kind, q, q.view(np.uint64), sc, mn, row, base)
    elif kind == IQ3_S or kind == IQ3_XXS:
        _iq3(kind, q, q.view(np.uint32), sc, mn, row, base)
    else:
        _iq1(kind, q, q.view(np.uint64), sc, mn, row, base)
