"""numpy twin of kernels.attention_ext.paged_attention_ext (float64 maths)."""

from __future__ import annotations

import numpy as np


def _f32(pages: np.ndarray) -> np.ndarray:
    return pages.view(np.float16).astype(np.float32) if pages.dtype == np.uint16 else pages


def paged_attention_ext(out, q, k_pages, v_pages, block_tables, q_start, pos_start, scale, window, softcap, sinks):
    T, H, D = q.shape
    Z, K = k_pages.shape[1], k_pages.shape[2]
    G = H // K
    kp, vp = _f32(k_pages), _f32(v_pages)
    for s in range(block_tables.shape[0]):
        for t in range(int(q_start[s]), int(q_start[s + 1])):
            pos = int(pos_start[s]) + t - int(q_start[s])
            lo = max(0, pos - window + 1) if window > 0 else 0
            p = np.arange(lo, pos + 1)
            pages = block_tables[s, p // Z]
            keys, vals = kp[pages, p % Z], vp[pages, p % Z]  # (n, K, D)
            for h in range(H):
                sc = (keys[:, h // G, :].astype(np.float64) @ q[t, h].astype(np.float64)) * scale  # (n,)
                if softcap > 0:
                    sc = softcap * np.tanh(sc / softcap)
                m = max(sc.max(), float(sinks[h])) if len(sinks) else sc.max()
                w = np.exp(sc - m)
                tot = w.sum() + (np.exp(float(sinks[h]) - m) if len(sinks) else 0.0)
                out[t, h] = ((w / tot) @ vals[:, h // G, :].astype(np.float64)).astype(np.float32)
