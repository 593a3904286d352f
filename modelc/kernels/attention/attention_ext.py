"""Paged causal attention with Gemma 2's score soft-capping and gpt-oss's attention sinks.

The same contract as kernels.attention.attention.paged_attention plus two switches:
  softcap > 0: scores = softcap * tanh(scores / softcap) (after the scale, before the softmax);
  sinks (H,) float32, or an empty array: one extra logit per head in the softmax's denominator
  that attends to nothing (gpt-oss), i.e. weights = exp(s) / (sum exp(s) + exp(sink)).
Kept apart from the hot kernel so the plain path stays as it is. numpy twin: ref_attention_ext.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from modelc.kernels.attention.kv_dtype import load_f32


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True)
def _row(out, q, k_pages, v_pages, block_tables, s, t, pos, scale, window, softcap, sinks, h):
    D = q.shape[2]
    Z, K = k_pages.shape[1], k_pages.shape[2]
    kh = h // (q.shape[1] // K)
    lo = 0
    if window > 0 and pos - window + 1 > 0:
        lo = pos - window + 1
    n = pos + 1 - lo
    sc = np.empty(n, dtype=np.float32)
    qrow = q[t, h]
    m = -np.inf
    for j in range(n):
        p = lo + j
        krow = k_pages[block_tables[s, p // Z], p % Z, kh]
        acc = np.float32(0.0)
        for d in range(D):
            acc += qrow[d] * load_f32(krow[d])
        v = acc * scale
        if softcap > 0.0:
            v = np.float32(softcap * math.tanh(v / softcap))
        sc[j] = v
        m = max(m, v)
    has_sink = sinks.shape[0] > 0
    if has_sink:
        m = max(m, np.float32(sinks[h]))
    tot = np.float32(0.0)
    for j in range(n):
        e = np.float32(math.exp(sc[j] - m))
        sc[j] = e
        tot += e
    if has_sink:
        tot += np.float32(math.exp(sinks[h] - m))
    acc_v = np.zeros(D, dtype=np.float32)
    for j in range(n):
        p = lo + j
        vrow = v_pages[block_tables[s, p // Z], p % Z, kh]
        w = sc[j]
        for d in range(D):
            acc_v[d] += w * load_f32(vrow[d])
    inv = np.float32(1.0) / tot
    for d in range(D):
        out[t, h, d] = acc_v[d] * inv


@njit(cache=True, nogil=True, error_model="numpy", parallel=True)
def paged_attention_ext(out, q, k_pages, v_pages, block_tables, q_start, pos_start, scale, window, softcap, sinks):
    """out (T, H, D) = attention of q (T, H, D) over the paged K/V, with soft-capping and sinks (see module)."""
    T, H, _ = q.shape
    S = q_start.shape[0] - 1
    row_seq = np.empty(T, dtype=np.int64)
    for s in range(S):
        for t in range(q_start[s], q_start[s + 1]):
            row_seq[t] = s
    for item in prange(T * H):
        t = item // H
        h = item % H
        s = row_seq[t]
        pos = pos_start[s] + t - q_start[s]
        _row(out, q, k_pages, v_pages, block_tables, s, t, pos, scale, window, softcap, sinks, h)
