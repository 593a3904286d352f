"""numpy twins for the i-quants, MXFP4 and the ternary types: (nb, type_size) uint8 -> (nb, block) f32.

Written from ggml-common.h's block layouts and ggml-quants.c's dequantize_row_*,
one readable step per field; ref_linear registers them. Tables: iq_tables.py.
Element order inside a 256-block: sub-block ib (32 elements), then group l of
8 within it, then j.
"""

from __future__ import annotations

import numpy as np

from modelc.ir import DataType
from modelc.kernels.quant import iq_tables as tb


def _f16(b: np.ndarray) -> np.ndarray:
    """(nb, 2) uint8 -> (nb, 1) f32."""
    return np.ascontiguousarray(b).view("<f2").astype(np.float32)


def _u16(b: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(b).view("<u2").astype(np.uint32)


def _u32(b: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(b).view("<u4").astype(np.uint32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """(..., 16) uint8 -> (..., 32) int64: low nibbles are elements 0..15, high ones 16..31."""
    return np.concatenate([qs & 15, qs >> 4], axis=-1).astype(np.int64)


def _sign_bits(s: np.ndarray) -> np.ndarray:
    """(...,) uint8 sign bytes -> (..., 8) f32 of +1 / -1 (bit j set = element j negative)."""
    bits = (s[..., None].astype(np.int64) >> np.arange(8)) & 1
    return np.where(bits == 1, np.float32(-1.0), np.float32(1.0))


def iq4_nl(b: np.ndarray) -> np.ndarray:
    return _f16(b[:, 0:2]) * tb.KVALUES_IQ4NL[_nibbles(b[:, 2:18])].astype(np.float32)


def iq4_xs(b: np.ndarray) -> np.ndarray:
    nb = b.shape[0]
    d = _f16(b[:, 0:2])  # (nb, 1)
    sh = _u16(b[:, 2:4])  # (nb, 1)
    ib = np.arange(8)
    low = (b[:, 4 + ib // 2].astype(np.int64) >> (4 * (ib % 2))) & 15  # (nb, 8)
    high = (sh.astype(np.int64) >> (2 * ib)) & 3
    dl = d * ((low | (high << 4)) - 32).astype(np.float32)  # (nb, 8)
    q = tb.KVALUES_IQ4NL[_nibbles(b[:, 8:136].reshape(nb, 8, 16))].astype(np.float32)  # (nb, 8, 32)
    return (dl[:, :, None] * q).reshape(nb, 256)


def e8m0_half(e: np.ndarray) -> np.ndarray:
    """MXFP4 scale byte -> float32 2^(e - 128) (ggml_e8m0_to_fp32_half), exact bits."""
    e = e.astype(np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - 1) << np.uint32(23)).astype(np.uint32)
    return bits.view(np.float32)


def mxfp4(b: np.ndarray) -> np.ndarray:
    return e8m0_half(b[:, 0:1]) * tb.KVALUES_MXFP4[_nibbles(b[:, 1:17])].astype(np.float32)


def _trits(qs: np.ndarray, pows: tuple[int, ...]) -> np.ndarray:
    """(nb, m) base-3 packed bytes -> (nb, len(pows) * m) trits 0..2, power-major."""
    t = [((qs.astype(np.uint8) * np.uint8(p)).astype(np.uint16) * 3) >> 8 for p in pows]
    return np.concatenate(t, axis=1).astype(np.int64)


def tq1_0(b: np.ndarray) -> np.ndarray:
    d = _f16(b[:, 52:54])
    p5 = (1, 3, 9, 27, 81)
    q = np.concatenate([_trits(b[:, 0:32], p5), _trits(b[:, 32:48], p5), _trits(b[:, 48:52], p5[:4])], axis=1)
    return d * (q - 1).astype(np.float32)


def tq2_0(b: np.ndarray) -> np.ndarray:
    nb = b.shape[0]
    q = (b[:, 0:64].reshape(nb, 2, 1, 32).astype(np.int64) >> (2 * np.arange(4)).reshape(1, 1, 4, 1)) & 3
    return _f16(b[:, 64:66]) * (q.reshape(nb, 256) - 1).astype(np.float32)


def q1_0(b: np.ndarray) -> np.ndarray:
    """llama.cpp dequantize_row_q1_0: bit set -> d, clear -> -d (element j: bit j % 8 of byte 2 + j // 8)."""
    bits = (b[:, 2:18, None].astype(np.int64) >> np.arange(8)) & 1  # (nb, 16, 8)
    return _f16(b[:, 0:2]) * (2 * bits.reshape(-1, 128) - 1).astype(np.float32)


def q2_0(b: np.ndarray) -> np.ndarray:
    """llama.cpp dequantize_row_q2_0: (code - 1) * d (element j: bits 2(j % 4) of byte 2 + j // 4)."""
    q = (b[:, 2:18, None].astype(np.int64) >> (2 * np.arange(4))) & 3  # (nb, 16, 4)
    return _f16(b[:, 0:2]) * (q.reshape(-1, 64) - 1).astype(np.float32)


def iq2_xxs(b: np.ndarray) -> np.ndarray:
    nb = b.shape[0]
    d = _f16(b[:, 0:2])
    aux = _u32(b[:, 2:66]).reshape(nb, 8, 2)  # per 32: grid bytes, then signs + scale
    db = d * (np.float32(0.5) + (aux[:, :, 1] >> 28).astype(np.float32)) * np.float32(0.25)  # (nb, 8)
    idx = np.ascontiguousarray(b[:, 2:66]).reshape(nb, 8, 8)[:, :, 0:4]  # (nb, 8, 4)
    sidx = (aux[:, :, 1:2] >> (7 * np.arange(4, dtype=np.uint32))) & 127  # (nb, 8, 4)
    g = tb.IQ2XXS_GRID[idx].astype(np.float32) * _sign_bits(tb.KSIGNS[sidx])  # (nb, 8, 4, 8)
    return (db[:, :, None, None] * g).reshape(nb, 256)


def _db_4bit(d: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """(nb, 1) d, (nb, 8) bytes of two 4-bit scales -> (nb, 8, 2): d * (0.5 + s) * 0.25 per 16."""
    s = np.stack([scales & 15, scales >> 4], axis=2).astype(np.float32)
    return d[:, :, None] * (np.float32(0.5) + s) * np.float32(0.25)


def iq2_xs(b: np.ndarray) -> np.ndarray:
    nb = b.shape[0]
    db = _db_4bit(_f16(b[:, 0:2]), b[:, 66:74])  # (nb, 8, 2)
    q = _u16(b[:, 2:66]).reshape(nb, 8, 4)
    g = tb.IQ2XS_GRID[q & 511].astype(np.float32) * _sign_bits(tb.KSIGNS[q >> 9])  # (nb, 8, 4, 8)
    return (np.repeat(db, 2, axis=2)[:, :, :, None] * g).reshape(nb, 256)


def iq2_s(b: np.ndarray) -> np.ndarray:
    nb = b.shape[0]
    db = _db_4bit(_f16(b[:, 0:2]), b[:, 74:82])
    low = b[:, 2:34].reshape(nb, 8, 4).astype(np.int64)
    high = (b[:, 66:74, None].astype(np.int64) >> (2 * np.arange(4))) & 3  # (nb, 8, 4)
    g = tb.IQ2S_GRID[low | (high << 8)].astype(np.float32) * _sign_bits(b[:, 34:66].reshape(nb, 8, 4))
    return (np.repeat(db, 2, axis=2)[:, :, :, None] * g).reshape(nb, 256)


def iq3_xxs(b: np.ndarray) -> np.ndarray:
    nb = b.shape[0]
    d = _f16(b[:, 0:2])
    aux = _u32(b[:, 66:98])  # (nb, 8)
    db = d * (np.float32(0.5) + (aux >> 28).astype(np.float32)) * np.float32(0.5)
    g = tb.IQ3XXS_GRID[b[:, 2:66].reshape(nb, 8, 4, 2)].reshape(nb, 8, 4, 8).astype(np.float32)
    sidx = (aux[:, :, None] >> (7 * np.arange(4, dtype=np.uint32))) & 127
    return (db[:, :, None, None] * g * _sign_bits(tb.KSIGNS[sidx])).reshape(nb, 256)


def iq3_s(b: np.ndarray) -> np.ndarray:
    nb = b.shape[0]
    d = _f16(b[:, 0:2])
    ib = np.arange(8)
    s = (b[:, 106 + ib // 2].astype(np.int64) >> (4 * (ib % 2))) & 15
    db = d * (1 + 2 * s).astype(np.float32)  # (nb, 8)
    high = (b[:, 66:74, None].astype(np.int64) >> np.arange(8)) & 1  # (nb, 8, 8): bit k of qh[ib]
    idx = b[:, 2:66].reshape(nb, 8, 8).astype(np.int64) | (high << 8)
    g = tb.IQ3S_GRID[idx].reshape(nb, 8, 4, 8).astype(np.float32)
    return (db[:, :, None, None] * g * _sign_bits(b[:, 74:106].reshape(nb, 8, 4))).reshape(nb, 256)


def _delta(neg: np.ndarray) -> np.ndarray:
    return np.where(neg, np.float32(-tb.IQ1_DELTA), np.float32(tb.IQ1_DELTA))


def iq1_s(b: np.ndarray) -> np.ndarray:
    nb = b.shape[0]
    d = _f16(b[:, 0:2])
    qh = _u16(b[:, 34:50]).astype(np.int64)  # (nb, 8)
    dl = d * (2 * ((qh >> 12) & 7) + 1).astype(np.float32)
    idx = b[:, 2:34].reshape(nb, 8, 4).astype(np.int64) | (((qh[:, :, None] >> (3 * np.arange(4))) & 7) << 8)
    g = tb.IQ1S_GRID[idx].astype(np.float32) + _delta((qh & 0x8000) != 0)[:, :, None, None]  # (nb, 8, 4, 8)
    return (dl[:, :, None, None] * g).reshape(nb, 256)


def iq1_m_scale(sc: np.ndarray) -> np.ndarray:
    """(nb, 4) u16 scale words -> (nb, 1) f32: the block's fp16 d, kept in the words' top nibbles."""
    bits = (sc[:, 0] >> 12) | ((sc[:, 1] >> 8) & 0xF0) | ((sc[:, 2] >> 4) & 0xF00) | (sc[:, 3] & 0xF000)
    return bits.astype(np.uint16).view("<f2").astype(np.float32).reshape(-1, 1)


def iq1_m(b: np.ndarray) -> np.ndarray:
    nb = b.shape[0]
    sc = _u16(b[:, 48:56]).astype(np.int64)  # (nb, 4)
    d = iq1_m_scale(sc)
    k = np.arange(16)  # scale k covers elements 16k .. 16k+15
    s = (sc[:, k // 4] >> (3 * (k % 4))) & 7
    dl = (d * (2 * s + 1).astype(np.float32)).reshape(nb, 8, 2)
    nib = (b[:, 32:48, None].astype(np.int64) >> np.array([0, 4])).reshape(nb, 8, 4)  # per group of 8
    idx = b[:, 0:32].reshape(nb, 8, 4).astype(np.int64) | ((nib & 7) << 8)
    g = tb.IQ1S_GRID[idx].astype(np.float32) + _delta((nib & 8) != 0)[:, :, :, None]
    return (np.repeat(dl, 2, axis=2)[:, :, :, None] * g).reshape(nb, 256)


BLOCK_DEQUANT = {
    DataType.IQ4_NL: iq4_nl,
    DataType.IQ4_XS: iq4_xs,
    DataType.MXFP4: mxfp4,
    DataType.TQ1_0: tq1_0,
    DataType.TQ2_0: tq2_0,
    DataType.Q1_0: q1_0,
    DataType.Q2_0: q2_0,
    DataType.IQ2_XXS: iq2_xxs,
    DataType.IQ2_XS: iq2_xs,
    DataType.IQ2_S: iq2_s,
    DataType.IQ3_XXS: iq3_xxs,
    DataType.IQ3_S: iq3_s,
    DataType.IQ1_S: iq1_s,
    DataType.IQ1_M: iq1_m,
}
