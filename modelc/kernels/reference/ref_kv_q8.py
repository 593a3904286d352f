"""Numpy twins of kv_q8.py and attention_q8.py (the q8_0 / mixed KV cache), written to be obviously right."""

from __future__ import annotations

import numpy as np


def quant_rows(x: np.ndarray, nb: int) -> tuple[np.ndarray, np.ndarray]:
    """x (..., D) float32 -> (int8 (..., D), fp16 bits (..., NB)): per block d = amax / 127, q = floor(x / d + 0.5)."""
    xb = x.reshape(*x.shape[:-1], nb, -1).astype(np.float32)  # (..., NB, QB)
    d = (np.abs(xb).max(axis=-1) / np.float32(127.0)).astype(np.float32)  # (..., NB)
    with np.errstate(divide="ignore"):
        inv = np.where(d > 0, np.float32(1.0) / d, np.float32(0.0)).astype(np.float32)
    q = np.floor(xb * inv[..., None] + np.float32(0.5)).astype(np.int8).reshape(x.shape)
    return q, d.astype(np.float16).view(np.uint16)


def dequant_rows(q: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """int8 (..., D) and fp16 bits (..., NB) -> float32 (..., D)."""
    nb = scales.shape[-1]
    d = scales.view(np.float16).astype(np.float32)  # (..., NB)
    return (q.reshape(*q.shape[:-1], nb, -1).astype(np.float32) * d[..., None]).reshape(q.shape)


def kv_write_q8(kq, ks, vq, vs, hot_of, kh, vh, k, v, slots):
    Z = kq.shape[1]
    keep = slots >= 0
    s = slots[keep]
    page, off = s // Z, s % Z
    kq[page, off], ks[page, off] = quant_rows(k[keep], ks.shape[-1])
    vq[page, off], vs[page, off] = quant_rows(v[keep], vs.shape[-1])
    hs = hot_of[page]
    hot = hs >= 0
    kh[hs[hot], off[hot]] = k[keep][hot]
    vh[hs[hot], off[hot]] = v[keep][hot]


def paged_attention_q8(
    out, q, kq, ks, vq, vs, hot_of, kh, vh, window_hot, block_tables, q_start, pos_start, scale, window
):
    T, H, D = q.shape
    Z, K = kq.shape[1], kq.shape[2]
    G = H // K
    for s in range(block_tables.shape[0]):
        for t in range(int(q_start[s]), int(q_start[s + 1])):
            pos = int(pos_start[s]) + t - int(q_start[s])
            lo = max(0, pos - window + 1) if window > 0 else 0
            p = np.arange(lo, pos + 1)
            pages = block_tables[s, p // Z]
            keys = dequant_rows(kq[pages, p % Z], ks[pages, p % Z])  # (n, K, D)
            vals = dequant_rows(vq[pages, p % Z], vs[pages, p % Z])
            hs = hot_of[pages]
            use = (hs >= 0) & (pos - p < window_hot)
            keys[use] = kh[hs[use], p[use] % Z]
            vals[use] = vh[hs[use], p[use] % Z]
            for h in range(H):
                sc = (keys[:, h // G, :].astype(np.float64) @ q[t, h].astype(np.float64)) * scale  # (n,)
                w = np.exp(sc - sc.max())
                out[t, h] = ((w / w.sum()) @ vals[:, h // G, :].astype(np.float64)).astype(np.float32)
