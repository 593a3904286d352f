"""The numpy twin of gemm_r16.repack: the same bytes, moved with reshapes and transposes."""

from __future__ import annotations

import numpy as np

from modelc.ir import DataType
from modelc.kernels.matmul.gemm_r16 import _BLOCK, _HEADS, BYTES, GROUP, KIND


def repack(blocks: np.ndarray, dtype: DataType) -> np.ndarray:
    """The numpy twin of gemm_r16.repack (about 0.2-0.3 GB/s: numpy's transposes of small units)."""
    kind = KIND[dtype]
    if kind in (KIND[DataType.Q4_K], KIND[DataType.IQ4_XS]):
        return _repack_super(blocks, _BLOCK[kind])
    if kind == KIND[DataType.Q6_K]:
        from modelc.kernels.reference import ref_r16_q6k

        return ref_r16_q6k.repack(blocks)
    n, row_bytes = blocks.shape
    bs = _BLOCK[kind]
    heads = _HEADS.get(kind, 1)  # fp16 fields before the codes: d (Q4_1: d, m)
    nb = row_bytes // bs
    g = n // GROUP
    chunks = (bs - 2 * heads) // 4
    b = np.asarray(blocks).reshape(g, GROUP, nb, bs)
    out = np.empty((g, nb, BYTES[kind]), np.uint8)
    for h in range(heads):  # 16 rows' field h, row order
        field = np.ascontiguousarray(b[..., 2 * h : 2 * h + 2]).view(np.uint16)[..., 0]  # (G, 16 rows, nb)
        out[:, :, 32 * h : 32 * h + 32].view(np.uint16)[...] = field.transpose(0, 2, 1)
    q = np.ascontiguousarray(b[..., 2 * heads :]).view(np.uint32)  # (G, 16 rows, nb, chunks)
    out[:, :, 32 * heads :].view(np.uint32).reshape(g, nb, chunks, GROUP)[...] = q.transpose(0, 2, 3, 1)
    return out.reshape(g, nb * BYTES[kind])


def _repack_super(blocks: np.ndarray, bs: int) -> np.ndarray:
    """Q4_K (bs 144: d, dmin, 35 words) and IQ4_XS (bs 136: d, scales_h, 33 words): two 16-bit fields, then 4-byte words."""
    n, row_bytes = blocks.shape
    nb, g, nw = row_bytes // bs, n // GROUP, (bs - 4) // 4
    b = np.asarray(blocks).reshape(g, GROUP, nb, bs)
    d = b[..., 0:2].transpose(0, 2, 1, 3).reshape(g, nb, 32)
    f2 = b[..., 2:4].transpose(0, 2, 1, 3).reshape(g, nb, 32)
    words = b[..., 4:].reshape(g, GROUP, nb, nw, 4).transpose(0, 2, 3, 1, 4).reshape(g, nb, nw * 64)
    return np.ascontiguousarray(np.concatenate([d, f2, words], axis=2)).reshape(g, nb * 16 * bs)
