"""Paged causal attention reading q8_0 KV pages directly (and, for the mixed cache, f32 hot copies).

Same work split and contract as attention.paged_attention (its work_item, softmax_rows and
write_rows are shared); each K/V row is widened once into
a D-long f32 buffer that the G query heads of its group share (int8 -> f32 is a cheap vector
convert, so this runs at the f32 kernel's speed on a quarter of the bytes).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from modelc.kernels.attention.attention_parts import _row_seq, softmax_rows, work_item, write_rows
from modelc.kernels.attention.kv_q8 import dequant_row


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, inline="always")
def _dots(scores, qg, krow, j, scale):
    """scores[g, j] = scale * qg[g] . krow for the G query heads of one group."""
    for g in range(qg.shape[0]):
        qrow = qg[g]
        acc = np.float32(0.0)
        for d in range(krow.shape[0]):
            acc += qrow[d] * krow[d]
        scores[g, j] = acc * scale


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, inline="always")
def _accum(acc_v, scores, vrow, j):
    """acc_v[g] += scores[g, j] * vrow."""
    for g in range(acc_v.shape[0]):
        w = scores[g, j]
        arow = acc_v[g]
        for d in range(vrow.shape[0]):
            arow[d] += w * vrow[d]


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, inline="always")
def _attend_q8(out, q, kq, ks, vq, vs, hot_of, kh, vh, window_hot, block_tables, q_start, pos_start, row_seq,
               scale, window, item):  # fmt: skip
    """One (query row, KV head) work item: the G query heads of that KV head's group.

    NOTE: positions [lo, hot_lo) can only be int8 (older than window_hot); only [hot_lo, pos] look
    up a hot copy. Two loops instead of one branch per row: the branch cost 2-3x (measured).
    """
    T, H, D = q.shape
    Z = kq.shape[1]
    K = kq.shape[2]
    G = H // K
    t, kvh, s, pos, lo = work_item(T, K, item, row_seq, q_start, pos_start, window)
    n = pos + 1 - lo
    hot_lo = pos + 1
    if window_hot > 0:
        hot_lo = max(lo, pos - window_hot + 1)
    bt = block_tables[s]
    qg = q[t, kvh * G : (kvh + 1) * G]  # (G, D)
    scores = np.empty((G, n), dtype=np.float32)
    buf = np.empty(D, dtype=np.float32)
    for p in range(lo, hot_lo):
        page = bt[p // Z]
        dequant_row(buf, kq[page, p % Z, kvh], ks[page, p % Z, kvh])
        _dots(scores, qg, buf, p - lo, scale)
    for p in range(hot_lo, pos + 1):
        page = bt[p // Z]
        hs = hot_of[page]
        if hs >= 0:
            _dots(scores, qg, kh[hs, p % Z, kvh], p - lo, scale)
        else:
            dequant_row(buf, kq[page, p % Z, kvh], ks[page, p % Z, kvh])
            _dots(scores, qg, buf, p - lo, scale)
    denom = softmax_rows(scores)
    acc_v = np.zeros((G, D), dtype=np.float32)
    for p in range(lo, hot_lo):
        page = bt[p // Z]
        dequant_row(buf, vq[page, p % Z, kvh], vs[page, p % Z, kvh])
        _accum(acc_v, scores, buf, p - lo)
    for p in range(hot_lo, pos + 1):
        page = bt[p // Z]
        hs = hot_of[page]
        if hs >= 0:
            _accum(acc_v, scores, vh[hs, p % Z, kvh], p - lo)
        else:
            dequant_row(buf, vq[page, p % Z, kvh], vs[page, p % Z, kvh])
            _accum(acc_v, scores, buf, p - lo)
    write_rows(out, acc_v, denom, t, kvh * G)


# fastmath=True: vectorized D-long reductions (reassociation only), as in attention.py.
@njit(cache=True, nogil=True, error_model="numpy", fastmath=True)
def paged_attention_q8(out, q, kq, ks, vq, vs, hot_of, kh, vh, window_hot, block_tables, q_start, pos_start, scale,
                       window):  # fmt: skip
    """Causal attention over q8_0 pages (QPages fields spelled out), on the calling thread.

    out, q: (T, H, D) float32; kq, vq: (P, Z, K, D) int8; ks, vs: (P, Z, K, NB) uint16 fp16 scales;
    hot_of: (P,) int32; kh, vh: (PH, Z, K, D) float32; window_hot: rows with pos - p < window_hot on
    a hot page are read from kh/vh. Other arguments as attention.paged_attention.
    """
    T = q.shape[0]
    K = kq.shape[2]
    row_seq = _row_seq(T, q_start)
    for item in range(T * K):
        _attend_q8(out, q, kq, ks, vq, vs, hot_of, kh, vh, window_hot, block_tables, q_start, pos_start, row_seq,
                   scale, window, item)  # fmt: skip


# parallel=True: (row, KV head) items are independent (see attention.paged_attention_parallel).
@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, parallel=True)
def paged_attention_q8_parallel(out, q, kq, ks, vq, vs, hot_of, kh, vh, window_hot, block_tables, q_start, pos_start,
                                scale, window):  # fmt: skip
    """paged_attention_q8 with the items spread over numba's threads. Same contract."""
    T = q.shape[0]
    K = kq.shape[2]
    row_seq = _row_seq(T, q_start)
    for item in prange(T * K):
        _attend_q8(out, q, kq, ks, vq, vs, hot_of, kh, vh, window_hot, block_tables, q_start, pos_start, row_seq,
                   scale, window, item)  # fmt: skip
