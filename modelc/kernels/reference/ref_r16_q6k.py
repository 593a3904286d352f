"""Numpy twins for gemm_r16_q6k: its repack (the same bytes) and a dequantizer that reads the repacked layout."""

from __future__ import annotations

import numpy as np

from modelc.kernels.matmul.gemm_r16_q6k import BLOCK, BYTES, GROUP


def repack(blocks: np.ndarray) -> np.ndarray:
    """(N, C/256 * 210) uint8 Q6_K in file layout -> (N/16, C/256 * 3360): gemm_r16_q6k.repack's bytes."""
    n, row_bytes = blocks.shape
    nb, g = row_bytes // BLOCK, n // GROUP
    b = np.asarray(blocks).reshape(g, GROUP, nb, BLOCK)
    d = b[..., 208:210].transpose(0, 2, 1, 3).reshape(g, nb, 32)
    scales = b[..., 192:208].transpose(0, 2, 3, 1).reshape(g, nb, 256)  # (group, block, scale s, row r)
    ql = b[..., :128].reshape(g, GROUP, nb, 2, 2, 8, 4)  # (half, low|high 32 bytes, word k, byte)
    qh = b[..., 128:192].reshape(g, GROUP, nb, 2, 1, 8, 4)
    words = np.concatenate([qh, ql], axis=4)  # per half: qh, ql low, ql high
    words = words.transpose(0, 2, 3, 4, 5, 1, 6).reshape(g, nb, 48 * 64)  # (g, nb, half, run, k, row, byte)
    return np.ascontiguousarray(np.concatenate([d, scales, words], axis=2)).reshape(g, nb * BYTES)


def dequantize(rw: np.ndarray) -> np.ndarray:
    """(N/16, C/256 * 3360) repacked Q6_K -> (N, C) f32, read from the repacked layout alone."""
    g, nbytes = rw.shape
    nb = nbytes // BYTES
    v = rw.reshape(g, nb, BYTES)
    d = np.ascontiguousarray(v[..., :32]).view("<f2").astype(np.float32)  # (g, nb, 16 rows)
    sc = (
        np.ascontiguousarray(v[..., 32:288]).view(np.int8).reshape(g, nb, 16, GROUP).astype(np.float32)
    )  # (g, nb, s, r)
    runs = v[..., 288:].reshape(g, nb, 2, 3, 8, GROUP, 4)  # (half, run, chunk k, row, byte)
    qh = runs[:, :, :, :1]  # qh byte 32 h + 4k + i
    ql = runs[:, :, :, 1:]  # ql byte 64 h + 32 ab + 4k + i
    lo = np.stack([ql & 15, ql >> 4], axis=3)  # (g, nb, h, nib, ab, k, r, i): m = 2 nib + ab
    m = np.arange(4).reshape(2, 2)
    hi = (qh[..., None, :, :, :, :] >> (2 * m).reshape(1, 1, 1, 2, 2, 1, 1, 1).astype(np.uint8)) & 3
    q = (lo.astype(np.int32) | (hi.astype(np.int32) << 4)) - 32  # (g, nb, h, nib, ab, k, r, i)
    q = q.reshape(g, nb, 2, 4, 8, GROUP, 4).transpose(0, 5, 1, 2, 3, 4, 6).reshape(g, GROUP, nb, 256)
    w = q * np.repeat(sc.transpose(0, 3, 1, 2), 16, axis=3).reshape(g, GROUP, nb, 256)
    w = w * d.transpose(0, 2, 1)[..., None]
    return w.reshape(g * GROUP, nb * 256).astype(np.float32)
