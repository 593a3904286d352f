"""numpy twin of kernels.attention.attention_ext.paged_attention_ext (float64 maths)."""

from __future__ import annotations

import numpy as np

from modelc.kernels.reference.ref import attended_rows


def paged_attention_ext(out, q, k_pages, v_pages, block_tables, q_start, pos_start, scale, window, softcap, sinks):
    T, H, D = q.shape
    G = H // k_pages.shape[2]
    for t, keys, vals in attended_rows(k_pages, v_pages, block_tables, q_start, pos_start, window):
        for h in range(H):
            sc = (keys[:, h // G, :].astype(np.float64) @ q[t, h].astype(np.float64)) * scale  # (n,)
            if softcap > 0:
                sc = softcap * np.tanh(sc / softcap)
            m = max(sc.max(), float(sinks[h])) if len(sinks) else sc.max()
            w = np.exp(sc - m)
            tot = w.sum() + (np.exp(float(sinks[h]) - m) if len(sinks) else 0.0)
            out[t, h] = ((w / tot) @ vals[:, h // G, :].astype(np.float64)).astype(np.float32)
