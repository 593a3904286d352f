"""Decode-shaped attention over the q8_0 KV cache, on attention_rows' kernels: each work item widens its
positions' K and V rows to float32 in a scratch the size of a span, then runs attention_rows' row code on it.

attention_q8 reads one (row, KV head) at a time, dequantizing a position's row and dotting it with the group's
heads in scalar loops: at 16384 positions of a Llama-3-8B shape (32 layers, 8 KV heads, D 128, 2 threads) a
token's attention took ~1.9 s, 0.6 GB/s of the cache. Here the rows are split as attention_rows splits them
(_plan: a long row into spans over every KV head, merged after; a short one by KV heads or whole), each item's
int8 rows times their fp16 block scales written to float32 (the values kv_q8.dequant_row gives; the cache's
own numbers), and the scores and values come from the same 4 x 4 register tiles as the f32 / fp16 pages. The
spans are sized for float32 rows (span_len of 4-byte elements: 128 positions at K 8, D 128) so an item's
scratch stays in L2. Plain q8_0 pages only (QPages.window 0): the mixed cache keeps attention_q8.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from modelc.kernels.attention.attention_parts import _row_seq
from modelc.kernels.attention.attention_rows import _merge, _plan, _row_core, span_len
from modelc.kernels.attention.kv_q8 import dequant_row


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True)
def _q8_item(out, part_o, ml, no_ml, qf, kq, ks, vq, vs, block_tables, it, head_parts, H, scale):
    """One work item of attention_rows._plan on q8_0 pages: its positions' rows (its KV heads) widened, then
    _row_core."""
    Z, K, D = kq.shape[1], kq.shape[2], kq.shape[3]
    t, s, lo, n, part, span = it[0], it[1], it[2], it[3], it[4], it[5]
    k0, k1 = (0, K) if span >= 0 else (part * K // head_parts, (part + 1) * K // head_parts)
    kbuf = np.empty((n, K, D), np.float32)  # (n, K, D): heads outside k0 .. k1 - 1 never read
    vbuf = np.empty((n, K, D), np.float32)
    for j in range(n):
        p = lo + j
        page, off = block_tables[s, p // Z], p % Z
        for h in range(k0, k1):
            dequant_row(kbuf[j, h], kq[page, off, h], ks[page, off, h])
            dequant_row(vbuf[j, h], vq[page, off, h], vs[page, off, h])
    bases = np.arange(n) * (K * D)
    if span >= 0:
        _row_core(part_o, span, qf, kbuf.reshape(-1), vbuf.reshape(-1), bases, t, n, K, H, D, scale, 0, K, ml[span])
    else:
        _row_core(out, t, qf, kbuf.reshape(-1), vbuf.reshape(-1), bases, t, n, K, H, D, scale, k0, k1, no_ml)


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True)
def paged_attention_rows_q8(out, q, kq, ks, vq, vs, block_tables, q_start, pos_start, scale, window):
    """attention_q8.paged_attention_q8's contract for plain q8_0 pages (no hot copies; q and out C-contiguous,
    D % 16 == 0), on the calling thread: kq, vq (P, Z, K, D) int8, ks, vs (P, Z, K, NB) uint16 fp16 scales."""
    T, H, D = q.shape
    K = kq.shape[2]
    row_seq = _row_seq(T, q_start)
    items, first, count, num_spans = _plan(T, 1, row_seq, q_start, pos_start, window, span_len(K, D, 4))
    part_o = np.empty((num_spans, H, D), np.float32)
    ml = np.empty((num_spans, 2, H), np.float32)
    no_ml = np.empty((2, 0), np.float32)
    qf = q.reshape(-1)
    for i in range(items.shape[0]):
        _q8_item(out, part_o, ml, no_ml, qf, kq, ks, vq, vs, block_tables, items[i], 1, H, np.float32(scale))
    for t in range(T):
        if count[t]:
            _merge(out, t, part_o, ml, first[t], count[t])


# parallel=True: the work items (spans, KV-head parts, rows) are independent, as in attention_rows.
@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, parallel=True)
def paged_attention_rows_q8_parallel(out, q, kq, ks, vq, vs, block_tables, q_start, pos_start, scale, window):
    """paged_attention_rows_q8 with its work items spread over numba's threads (the same bits)."""
    T, H, D = q.shape
    K = kq.shape[2]
    row_seq = _row_seq(T, q_start)
    head_parts = K if T == 1 else 1
    items, first, count, num_spans = _plan(T, head_parts, row_seq, q_start, pos_start, window, span_len(K, D, 4))
    part_o = np.empty((num_spans, H, D), np.float32)
    ml = np.empty((num_spans, 2, H), np.float32)
    no_ml = np.empty((2, 0), np.float32)
    qf = q.reshape(-1)
    for i in prange(items.shape[0]):
        _q8_item(out, part_o, ml, no_ml, qf, kq, ks, vq, vs, block_tables, items[i], head_parts, H, np.float32(scale))
    for t in prange(T):
        if count[t]:
            _merge(out, t, part_o, ml, first[t], count[t])
