"""The numba pieces every paged attention kernel shares (attention, attention_q8, attention_rows): the work
split over (query row, KV head) items, each row's sequence, the row softmax and the output write.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from modelc.kernels.simd.fastexp import exp_weight

# error_model="numpy" on every kernel here: numba's default ("python") guards each float and
# integer division with a zero check that raises, and that branch stops LLVM from vectorizing
# the loop (measured 10x on SiLU). Inputs never divide by zero here (eps > 0, Z = 16).


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def work_item(T, K, item, row_seq, q_start, pos_start, window):
    """(t, kv head, sequence, position, first attended position) of a (query row, KV head) work item.

    NOTE: rows are visited short/long alternately so a static split of the items over threads
    gets a balanced share of causal work. Shared with attention_q8 and attention_rows (which passes the
    number of parts it splits a row into as K)."""
    rr = item // K
    t = rr // 2 if rr % 2 == 0 else T - 1 - rr // 2
    s = row_seq[t]
    pos = pos_start[s] + t - q_start[s]
    lo = 0
    if window > 0 and pos - window + 1 > 0:
        lo = pos - window + 1
    return t, item % K, s, pos, lo


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, inline="always")
def _m(a, b):
    return b if b > a else a


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, inline="always")
def _row_max(srow):
    """max(srow) (n >= 1) in 8 running maxima: one running maximum was a chain of dependent vmaxss, ~3 cycles a
    score on Zen 3 (a third of decode attention's softmax at 1900 positions); eight vectorize. Exact either way."""
    n = srow.shape[0]
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = srow[0]
    j = 0
    while j + 8 <= n:
        m0, m1, m2, m3 = _m(m0, srow[j]), _m(m1, srow[j + 1]), _m(m2, srow[j + 2]), _m(m3, srow[j + 3])
        m4, m5, m6, m7 = _m(m4, srow[j + 4]), _m(m5, srow[j + 5]), _m(m6, srow[j + 6]), _m(m7, srow[j + 7])
        j += 8
    m = _m(_m(_m(m0, m1), _m(m2, m3)), _m(_m(m4, m5), _m(m6, m7)))
    for i in range(j, n):
        m = _m(m, srow[i])
    return m


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, inline="always")
def softmax_rows(scores):
    """scores (G, n) -> exp(scores - row max) in place; returns the (G,) row sums. Shared with attention_q8."""
    return softmax_rows_max(scores, np.empty(scores.shape[0], dtype=np.float32))


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, inline="always")
def softmax_rows_max(scores, maxes):
    """softmax_rows, the (G,) row maxima also written to maxes (a span of a split row keeps them to merge)."""
    G, n = scores.shape
    denom = np.empty(G, dtype=np.float32)
    for g in range(G):
        srow = scores[g]  # (n,) view: bare-index loops vectorize
        m = _row_max(srow)
        maxes[g] = m
        tot = np.float32(0.0)
        for j in range(n):
            e = exp_weight(srow[j] - m)
            srow[j] = e
            tot += e
        denom[g] = tot
    return denom


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, inline="always")
def write_rows(out, acc_v, denom, t, h0):
    """out[t, h0 + g] = acc_v[g] / denom[g] for the G heads of a group. Shared with attention_q8."""
    G, D = acc_v.shape
    for g in range(G):
        inv = np.float32(1.0) / denom[g]
        for d in range(D):
            out[t, h0 + g, d] = acc_v[g, d] * inv


@njit(cache=True, nogil=True, error_model="numpy")
def _row_seq(T, q_start):
    """(T,) sequence index of each query row."""
    S = q_start.shape[0] - 1
    row_seq = np.empty(T, dtype=np.int64)
    for s in range(S):
        for t in range(q_start[s], q_start[s + 1]):
            row_seq[t] = s
    return row_seq
