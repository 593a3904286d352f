"""The numpy twin of gemm_r16.repack: the same bytes, moved with reshapes and transposes."""

from __future__ import annotations

import numpy as np

from modelc.ir import DataType
from modelc.kernels.gemm_r16 import _BLOCK, BYTES, GROUP, KIND


def repack(blocks: np.ndarray, dtype: DataType) -> np.ndarray:
    """The numpy twin of gemm_r16.repack (about 0.2-0.3 GB/s: numpy's transposes of small units)."""
    kind = KIND[dtype]
    n, row_bytes = blocks.shape
    bs = _BLOCK[kind]
    nb = row_bytes // bs
    g = n // GROUP
    chunks = (bs - 2) // 4
    b = np.asarray(blocks).reshape(g, GROUP, nb, bs)
    out = np.empty((g, nb, BYTES[kind]), np.uint8)
    out[:, :, :32].view(np.uint16)[...] = np.ascontiguousarray(b[..., :2]).view(np.uint16)[..., 0].transpose(0, 2, 1)
    q = np.ascontiguousarray(b[..., 2:]).view(np.uint32)  # (G, 16 rows, nb, chunks)
    out[:, :, 32:].view(np.uint32).reshape(g, nb, chunks, GROUP)[...] = q.transpose(0, 2, 3, 1)
    return out.reshape(g, nb * BYTES[kind])
