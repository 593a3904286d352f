"""numpy twins of the linear kernels: dequantize every stored type, matmul, activation quantize.

Written to be obviously right, not fast; no numba here. `modelc.kernels.reference.ref`
re-exports these. Block layouts are GGML's (ggml-common.h), unpacked per block.
"""

from __future__ import annotations

import numpy as np

from modelc.ir import DataType, TensorData
from modelc.kernels.matmul.gemm_weight import Weight, check_matmul_args, check_row_ids, make_weight
from modelc.kernels.reference import ref_iquant

QK = 32  # elements per activation block (Q8_0-style)


def _f16(b: np.ndarray) -> np.ndarray:
    """(nb, 2) uint8 -> (nb, 1) f32 from little-endian fp16."""
    return np.ascontiguousarray(b).view("<f2").astype(np.float32)


def _nibbles32(qs: np.ndarray) -> np.ndarray:
    """(nb, 16) uint8 -> (nb, 32): low nibbles are elements 0..15, high ones 16..31."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int32)


def _bits32(qh: np.ndarray) -> np.ndarray:
    """(nb, 4) uint8 (a little-endian u32) -> (nb, 32) bit j of the word."""
    return np.unpackbits(qh, axis=1, bitorder="little").astype(np.int32)


def _q4_0(b: np.ndarray) -> np.ndarray:
    return _f16(b[:, 0:2]) * (_nibbles32(b[:, 2:18]) - 8)


def _q4_1(b: np.ndarray) -> np.ndarray:
    return _f16(b[:, 0:2]) * _nibbles32(b[:, 4:20]) + _f16(b[:, 2:4])


def _q5_0(b: np.ndarray) -> np.ndarray:
    q = _nibbles32(b[:, 6:22]) | (_bits32(b[:, 2:6]) << 4)
    return _f16(b[:, 0:2]) * (q - 16)


def _q5_1(b: np.ndarray) -> np.ndarray:
    q = _nibbles32(b[:, 8:24]) | (_bits32(b[:, 4:8]) << 4)
    return _f16(b[:, 0:2]) * q + _f16(b[:, 2:4])


def _q8_0(b: np.ndarray) -> np.ndarray:
    return _f16(b[:, 0:2]) * np.ascontiguousarray(b[:, 2:34]).view(np.int8).astype(np.float32)


def _crumbs256(qs: np.ndarray) -> np.ndarray:
    """(nb, 64) uint8 of 2-bit values -> (nb, 256): element h*128 + s*32 + l = (qs[h*32+l] >> 2s) & 3."""
    nb = qs.shape[0]
    q = qs.reshape(nb, 2, 1, 32) >> (2 * np.arange(4, dtype=np.uint8)).reshape(1, 1, 4, 1)
    return (q & 3).reshape(nb, 256).astype(np.int32)


def _q2_k(b: np.ndarray) -> np.ndarray:
    nb = b.shape[0]
    sc = b[:, 0:16].astype(np.float32)  # (nb, 16) low 4 bits scale, high 4 bits min
    d, dmin = _f16(b[:, 80:82]), _f16(b[:, 82:84])
    q = _crumbs256(b[:, 16:80]).reshape(nb, 16, 16)
    dl = (d * (sc % 16)).reshape(nb, 16, 1)
    ml = (dmin * (sc // 16)).reshape(nb, 16, 1)
    return (dl * q - ml).reshape(nb, 256)


def q3_k_scales(s: np.ndarray) -> np.ndarray:
    """(nb, 12) packed 6-bit scales -> (nb, 16) int32 in -32..31."""
    j = np.arange(16)
    low = np.where(j < 8, s[:, j % 8] & 0x0F, s[:, j % 8] >> 4)
    high = (s[:, 8 + j % 4] >> (2 * (j // 4))) & 3
    return (low.astype(np.int32) | (high.astype(np.int32) << 4)) - 32


def _q3_k(b: np.ndarray) -> np.ndarray:
    nb = b.shape[0]
    hmask, qs, d = b[:, 0:32], b[:, 32:96], _f16(b[:, 108:110])
    sc = q3_k_scales(b[:, 96:108]).astype(np.float32)
    hbit = (hmask.reshape(nb, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)) & 1  # (nb, 8, 32)
    q = _crumbs256(qs) - 4 * (1 - hbit.reshape(nb, 256).astype(np.int32))
    return ((d * sc).reshape(nb, 16, 1) * q.reshape(nb, 16, 16)).reshape(nb, 256)


def k_scale_min(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K (nb, 12) packed 6-bit scales and mins -> two (nb, 8) int32."""
    s = s.astype(np.int32)
    a, m, md = s[:, 0:4], s[:, 4:8], s[:, 8:12]
    sc = np.concatenate([a & 63, (md & 15) | ((a >> 2) & 0x30)], axis=1)
    mn = np.concatenate([m & 63, (md >> 4) | ((m >> 2) & 0x30)], axis=1)
    return sc, mn


def _q4_k_nibbles(qs: np.ndarray) -> np.ndarray:
    """(nb, 128) -> (nb, 256): element (2g+h)*32 + l = (qs[g*32+l] >> 4h) & 15."""
    nb = qs.shape[0]
    q = qs.reshape(nb, 4, 1, 32) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    return (q & 15).reshape(nb, 256).astype(np.int32)


def _q4_k(b: np.ndarray) -> np.ndarray:
    nb = b.shape[0]
    d, dmin = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    sc, mn = k_scale_min(b[:, 4:16])
    q = _q4_k_nibbles(b[:, 16:144]).reshape(nb, 8, 32)
    return ((d * sc).reshape(nb, 8, 1) * q - (dmin * mn).reshape(nb, 8, 1)).reshape(nb, 256)


def _q5_k(b: np.ndarray) -> np.ndarray:
    nb = b.shape[0]
    d, dmin = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    sc, mn = k_scale_min(b[:, 4:16])
    qh = (b[:, 16:48].reshape(nb, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)) & 1  # (nb, 8, 32)
    q = _q4_k_nibbles(b[:, 48:176]).reshape(nb, 8, 32) | (qh.astype(np.int32) << 4)
    return ((d * sc).reshape(nb, 8, 1) * q - (dmin * mn).reshape(nb, 8, 1)).reshape(nb, 256)


def _q6_k(b: np.ndarray) -> np.ndarray:
    nb = b.shape[0]
    ql, qh = b[:, 0:128], b[:, 128:192]
    sc = np.ascontiguousarray(b[:, 192:208]).view(np.int8).astype(np.float32)
    d = _f16(b[:, 208:210])
    low = (ql.reshape(nb, 2, 1, 64) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)) & 15  # (nb, 2, 2, 64)
    high = (qh.reshape(nb, 2, 1, 32) >> (2 * np.arange(4, dtype=np.uint8)).reshape(1, 1, 4, 1)) & 3  # (nb, 2, 4, 32)
    q = (low.reshape(nb, 256).astype(np.int32) | (high.reshape(nb, 256).astype(np.int32) << 4)) - 32
    return ((d * sc).reshape(nb, 16, 1) * q.reshape(nb, 16, 16)).reshape(nb, 256)


def _q8_k(b: np.ndarray) -> np.ndarray:
    d = np.ascontiguousarray(b[:, 0:4]).view("<f4")
    return d * np.ascontiguousarray(b[:, 4:260]).view(np.int8).astype(np.float32)


_BLOCK_DEQUANT = {
    DataType.Q4_0: _q4_0,
    DataType.Q4_1: _q4_1,
    DataType.Q5_0: _q5_0,
    DataType.Q5_1: _q5_1,
    DataType.Q8_0: _q8_0,
    DataType.Q2_K: _q2_k,
    DataType.Q3_K: _q3_k,
    DataType.Q4_K: _q4_k,
    DataType.Q5_K: _q5_k,
    DataType.Q6_K: _q6_k,
    DataType.Q8_K: _q8_k,
    **ref_iquant.BLOCK_DEQUANT,
}


def _dequantize_rows(dtype: DataType, rb: np.ndarray, cols: int, scale: np.ndarray | None) -> np.ndarray:
    """(R, row_bytes) uint8 of `dtype` -> (R, cols) f32."""
    r = rb.shape[0]
    if dtype is DataType.F32:
        return np.ascontiguousarray(rb).view("<f4").reshape(r, cols).copy()
    if dtype is DataType.F16:
        return np.ascontiguousarray(rb).view("<f2").reshape(r, cols).astype(np.float32)
    if dtype is DataType.BF16:
        u = np.ascontiguousarray(rb).view("<u2").reshape(r, cols).astype(np.uint32) << 16
        return u.view(np.float32)
    if dtype is DataType.I8:
        return np.ascontiguousarray(rb).view(np.int8).reshape(r, cols).astype(np.float32) * scale.reshape(r, 1)
    if dtype is DataType.I4:
        nib = np.stack([rb & 0x0F, rb >> 4], axis=2).reshape(r, -1)[:, :cols].astype(np.int32)
        return (np.where(nib >= 8, nib - 16, nib).astype(np.float32)) * scale.reshape(r, 1)
    fn = _BLOCK_DEQUANT[dtype]
    blocks = np.ascontiguousarray(rb).reshape(-1, dtype.type_size)
    return fn(blocks).astype(np.float32).reshape(r, cols)


def dequantize(t: TensorData | Weight, scale: TensorData | None = None) -> np.ndarray:
    """Any tensor (or Weight) -> (rows, cols) f32, rows = product of the leading dims."""
    w = t if isinstance(t, Weight) else make_weight(t, scale, table=True)
    return _dequantize_rows(w.dtype, w.blocks, w.cols, w.scale)


def dequantize_rows(t: TensorData, row_ids: np.ndarray, scale: TensorData | None = None) -> np.ndarray:
    """Rows `row_ids` of table t (V, C) -> (len(row_ids), C) f32 (embedding lookup)."""
    w = make_weight(t, scale, table=True)
    ids = check_row_ids(row_ids, w.rows)
    return _dequantize_rows(w.dtype, w.blocks[ids], w.cols, None if w.scale is None else w.scale[ids])


def dequantize_weight_rows(w: Weight, row_ids: np.ndarray) -> np.ndarray:
    """Rows row_ids (int64, in range) of a prepared Weight -> (R, C) f32."""
    return _dequantize_rows(w.dtype, w.blocks[row_ids], w.cols, None if w.scale is None else w.scale[row_ids])


def matmul(out: np.ndarray, x: np.ndarray, w: Weight | TensorData) -> None:
    """out (T, N) f32 = x (T, C) f32 @ dequantize(w).T, in fp32."""
    if not isinstance(w, Weight):
        w = make_weight(w)
    check_matmul_args(out, x, w)
    out[...] = x @ dequantize(w).T


def quantize_act(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x (T, C) f32, C % 32 == 0 -> (q (T, C) int8, d (T, C // 32) f32), x ~= q * d per block.

    d = amax / 127 and q = round-half-away(x * (127 / amax)), all in float32: the
    numba kernel does exactly this, so integer dot products agree exactly.
    """
    t, c = x.shape
    xb = x.reshape(t, c // QK, QK)
    amax = np.abs(xb).max(axis=2)  # (T, C/32)
    d = (amax / np.float32(127.0)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, np.float32(127.0) / amax, np.float32(0.0)).astype(np.float32)
    v = xb * inv[:, :, None]
    q = np.trunc(v + np.copysign(np.float32(0.5), v)).astype(np.int8)
    return q.reshape(t, c), d


def bf16_round(a: np.ndarray) -> np.ndarray:
    """float32 values rounded to bf16 (nearest even; no NaN), as float32."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)


def matmul_bf16(out: np.ndarray, x: np.ndarray, w: Weight) -> None:
    """The bf16 twin: out = bf16(x) @ bf16(dequantize(w)).T, summed in float64. What the AMX bf16 tiles compute
    (gemm_tile_bf16), up to float summation order and the odd weight whose fp32 value rounds the other way (the kernel
    makes it with one fma)."""
    check_matmul_args(out, x, w)
    out[...] = bf16_round(x).astype(np.float64) @ bf16_round(dequantize(w)).astype(np.float64).T


def matmul_qact(out: np.ndarray, x: np.ndarray, w: Weight) -> None:
    """The quantized-activation twin: out = (x quantized to Q8_0-style blocks) @ dequantize(w).T.

    What the integer-dot kernels compute, up to float summation order.
    """
    check_matmul_args(out, x, w)
    q, d = quantize_act(x)
    t, c = x.shape
    xq = (q.reshape(t, c // QK, QK).astype(np.float32) * d[:, :, None]).reshape(t, c)
    out[...] = xq @ dequantize(w).T
