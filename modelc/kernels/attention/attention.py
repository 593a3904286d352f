"""Paged causal attention for a flat batch of query rows from many sequences (prefill, chunked prefill, decode).

One kernel serves all three: the K/V of every query row is written to the pages first
(kv_write), then row t of sequence s attends positions [lo, pos] of s through its block table.
"""

from __future__ import annotations

import os
import threading

import numpy as np
from numba import get_num_threads, njit, prange

from modelc.kernels.attention import attention_q8, attention_rows, attention_rows_q8
from modelc.kernels.attention.attention_parts import _row_seq, softmax_rows, work_item, write_rows
from modelc.kernels.attention.kv_dtype import load_f32
from modelc.kernels.simd.qdot import prefetch

# error_model="numpy" on every kernel here: numba's default ("python") guards each float and
# integer division with a zero check that raises, and that branch stops LLVM from vectorizing
# the loop (measured 10x on SiLU). Inputs never divide by zero here (eps > 0, Z = 16).


AHEAD = 8
"""Positions ahead whose K (V) row is prefetched while a row is read. In decode the KV pages come
from memory (the layer's weights streamed through the caches since the last step), and this VM's
hardware prefetcher does not follow the page-strided rows: TinyLlama decode attention at a
160-token context took 186 us per layer in the forward vs 56 us hot (#20 work)."""


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def prefetch_rows(kflat, vflat, block_tables, s, p, Z, K, kh, D):
    """Prefetch the K and V rows (D elements) of position p, KV head kh, of sequence s (the pages as 1-D)."""
    base = ((block_tables[s, p // Z] * Z + p % Z) * K + kh) * D
    step = 64 // kflat.itemsize
    for e in range(0, D, step):
        prefetch(kflat, base + e)
        prefetch(vflat, base + e)


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, inline="always")
def _attend(out, q, k_pages, v_pages, block_tables, q_start, pos_start, row_seq, scale, window, item):
    """One (query row, KV head) work item: the G query heads of that KV head's group."""
    T, H, D = q.shape
    Z = k_pages.shape[1]
    K = k_pages.shape[2]
    G = H // K
    t, kh, s, pos, lo = work_item(T, K, item, row_seq, q_start, pos_start, window)
    n = pos + 1 - lo
    h0 = kh * G
    scores = np.empty((G, n), dtype=np.float32)
    kbuf = np.empty(D, dtype=np.float32)
    kflat = k_pages.reshape(-1)
    vflat = v_pages.reshape(-1)
    for j in range(n):
        p = lo + j
        if j + AHEAD < n:  # both rows: V's are read in the second pass, from L2 by then
            prefetch_rows(kflat, vflat, block_tables, s, p + AHEAD, Z, K, kh, D)
        krow = k_pages[block_tables[s, p // Z], p % Z, kh]  # (D,) contiguous view
        # NOTE: the row goes through a local buffer first: with f32 pages LLVM cannot prove that
        # `scores` stores do not alias the page reads, and the dot loops ran ~10x slower (measured).
        for d in range(D):
            kbuf[d] = load_f32(krow[d])
        for g in range(G):
            qrow = q[t, h0 + g]
            acc = np.float32(0.0)
            for d in range(D):
                acc += qrow[d] * kbuf[d]
            scores[g, j] = acc * scale
    denom = softmax_rows(scores)
    acc_v = np.zeros((G, D), dtype=np.float32)
    vbuf = np.empty(D, dtype=np.float32)
    for j in range(n):
        p = lo + j
        vrow = v_pages[block_tables[s, p // Z], p % Z, kh]  # (D,)
        for d in range(D):
            vbuf[d] = load_f32(vrow[d])
        for g in range(G):
            w = scores[g, j]
            arow = acc_v[g]
            for d in range(D):
                arow[d] += w * vbuf[d]
    write_rows(out, acc_v, denom, t, h0)


# fastmath=True: lets LLVM vectorize the D-long dot-product reductions (reassociation only;
# results stay within ~1e-6 relative of the ordered sum, checked against ref in tests).
@njit(cache=True, nogil=True, error_model="numpy", fastmath=True)
def paged_attention(out, q, k_pages, v_pages, block_tables, q_start, pos_start, scale, window):
    """Causal attention over paged KV, on the calling thread.

    out: (T, H, D) float32, fully written; must not alias q.
    q: (T, H, D) float32 (rope already applied).
    k_pages, v_pages: (P, Z, K, D) float32 | uint16 (fp16 bits); H % K == 0 (GQA group G = H // K).
    block_tables: (S, B) int32; page of position p of sequence s = block_tables[s, p // Z].
    q_start: (S + 1,) int32, rows [q_start[s], q_start[s+1]) belong to sequence s.
    pos_start: (S,) int32, position of sequence s's first row.
    scale: float (1/sqrt(D) usually).  window: int, > 0 limits attention to the last `window` positions.
    """
    T = q.shape[0]
    K = k_pages.shape[2]
    row_seq = _row_seq(T, q_start)
    for item in range(T * K):
        _attend(out, q, k_pages, v_pages, block_tables, q_start, pos_start, row_seq, scale, window, item)


# parallel=True: rows x KV heads are independent and attention over long contexts is
# compute-bound (~2.7 GB/s of KV per core), so more cores help once there is enough work.
@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, parallel=True)
def paged_attention_parallel(out, q, k_pages, v_pages, block_tables, q_start, pos_start, scale, window):
    """paged_attention with the (row, KV head) items spread over numba's threads. Same contract."""
    T = q.shape[0]
    K = k_pages.shape[2]
    row_seq = _row_seq(T, q_start)
    for item in prange(T * K):
        _attend(out, q, k_pages, v_pages, block_tables, q_start, pos_start, row_seq, scale, window, item)


# (row, KV head) items x context positions below which a thread launch costs more than it saves
PARALLEL_MIN_WORK = 2048
ROWS_PARALLEL_MIN_WORK = 256
"""The same for attention_rows' kernel, which splits even one decode row by KV heads: it runs threaded from
TinyLlama's decode row at 64 positions, where the serial kernel takes ~20 us. Threaded, the attention
also keeps numba's second thread awake for the next matmul (a sleeping one costs ~50 us to wake here)."""
BLAS_MIN_ROWS = 64  # a sequence with this many query rows (a prefill chunk) goes through tiles or sgemm
FLASH_PREFILL = not attention_rows.NARROW and os.environ.get("MODELC_FLASH_PREFILL", "1") != "0"
"""Long chunks through attention_flash's tiles (their 16 accumulators of 16 lanes want AVX-512's 32 registers);
MODELC_FLASH_PREFILL=0 keeps them on sgemm (attention_blas), e.g. to compare the two."""


def paged_attention_auto(out, q, k_pages, v_pages, block_tables, q_start, pos_start, scale, window) -> None:
    """paged_attention, choosing per batch: sgemm for long prefill chunks, numba's threads when there
    is enough work to share, else the serial kernel. Same contract as paged_attention."""
    lens, most_rows, last_start = batch_facts(q_start, pos_start)
    if most_rows >= BLAS_MIN_ROWS:
        _with_blas_prefill(out, q, k_pages, v_pages, block_tables, q_start, pos_start, scale, window, lens)
        return
    _numba_attention(out, q, k_pages, v_pages, block_tables, q_start, pos_start, scale, window, last_start)


_facts = threading.local()


def batch_facts(q_start, pos_start) -> tuple[np.ndarray, int, int]:
    """(rows per sequence, the most rows of one sequence, the latest first position) of a batch. Every layer
    of a forward passes the same two arrays, so this thread's last answer is kept for them (numpy's diff and
    max cost ~7 us a layer). Only the choice of kernel depends on these, never a value."""
    got = getattr(_facts, "last", None)
    if got is not None and got[0] is q_start and got[1] is pos_start:
        return got[2]
    lens = np.diff(q_start)  # (S,) query rows per sequence
    S = pos_start.shape[0]
    facts = (lens, int(lens.max()) if S else 0, int(pos_start.max()) if S else 0)
    _facts.last = (q_start, pos_start, facts)
    return facts


def _numba_attention(out, q, k_pages, v_pages, block_tables, q_start, pos_start, scale, window,
                     last_start: int | None = None) -> None:  # fmt: skip
    items = q.shape[0] * k_pages.shape[2]
    parallel = False
    q8_rows = _q8_rows_apply(out, q, k_pages)
    rows = q8_rows or _rows_apply(out, q, k_pages)
    if pos_start.shape[0]:
        if last_start is None:
            last_start = int(pos_start.max())
        # get_num_threads costs ~10 us, so it is asked only when the work could be shared
        parallel = share_work(items, last_start + q.shape[0], rows) and get_num_threads() > 1
    if q8_rows:  # plain q8_0 pages: attention_rows' kernels on rows widened a span at a time
        fn = (
            attention_rows_q8.paged_attention_rows_q8_parallel
            if parallel
            else attention_rows_q8.paged_attention_rows_q8
        )
        fn(out, q, k_pages.data, k_pages.scales, v_pages.data, v_pages.scales, block_tables, q_start, pos_start, scale,
           window)  # fmt: skip
        return
    if isinstance(k_pages, tuple):  # kv_q8.QPages: the mixed cache
        fn = attention_q8.paged_attention_q8_parallel if parallel else attention_q8.paged_attention_q8
        k, v = k_pages, v_pages
        fn(out, q, k.data, k.scales, v.data, v.scales, k.hot_of, k.hot, v.hot, k.window, block_tables, q_start,
           pos_start, scale, window)  # fmt: skip
        return
    dense_kernel(out, q, k_pages, parallel, rows)(out, q, k_pages, v_pages, block_tables, q_start, pos_start, scale,
                                                  window)  # fmt: skip


def share_work(items: int, ctx: int, rows: bool) -> bool:
    """Whether `items` (row, KV head) items over contexts of up to `ctx` positions are worth numba's threads
    (given more than one): for attention_rows' kernel (`rows`) or paged_attention's."""
    return items >= 2 and items * ctx >= (ROWS_PARALLEL_MIN_WORK if rows else PARALLEL_MIN_WORK)


def dense_kernel(out, q, k_pages, parallel: bool, rows: bool | None = None):
    """The numba kernel for float32 / fp16 pages: attention_rows' (every head of a row together) where it
    applies (`rows`: _rows_apply's answer when known), else paged_attention's (row, KV head) items; the
    threaded variant where `parallel`."""
    if _rows_apply(out, q, k_pages) if rows is None else rows:
        return attention_rows.paged_attention_rows_parallel if parallel else attention_rows.paged_attention_rows
    return paged_attention_parallel if parallel else paged_attention


def _q8_rows_apply(out, q, k_pages) -> bool:
    """Whether attention_rows_q8's kernel takes these arrays (plain q8_0 pages: no hot window; D % 16 == 0,
    C-contiguous q, out)."""
    return (
        isinstance(k_pages, tuple)
        and k_pages.window == 0
        and q.shape[-1] % 16 == 0
        and q.flags.c_contiguous
        and out.flags.c_contiguous
    )


def _rows_apply(out, q, k_pages) -> bool:
    """Whether attention_rows' kernel takes these arrays (float32 / fp16 pages, D % 16 == 0, C-contiguous q, out)."""
    return (
        isinstance(k_pages, np.ndarray)
        and attention_rows.supported(q, k_pages)
        and q.flags.c_contiguous
        and out.flags.c_contiguous
    )


def _with_blas_prefill(out, q, k_pages, v_pages, block_tables, q_start, pos_start, scale, window, lens) -> None:
    """Long sequences one by one through attention_flash's tiles (sgemm where those do not apply: the mixed cache,
    groups not dividing 64, CPUs without AVX-512); the short ones (decodes) together through numba."""
    from modelc.kernels.attention import attention_flash
    from modelc.kernels.attention.attention_blas import attention_one_seq_blas

    flash = FLASH_PREFILL and attention_flash.supported(q, k_pages)
    short = []
    for s in range(pos_start.shape[0]):
        a, b = int(q_start[s]), int(q_start[s + 1])
        if lens[s] >= BLAS_MIN_ROWS and flash:
            attention_flash.prefill(out[a:b], q[a:b], k_pages, v_pages, block_tables[s], int(pos_start[s]), scale,
                                    window)  # fmt: skip
        elif lens[s] >= BLAS_MIN_ROWS:
            attention_one_seq_blas(out[a:b], q[a:b], k_pages, v_pages, block_tables[s], int(pos_start[s]), scale,
                                   window)  # fmt: skip
        elif b > a:
            short.append(s)
    if not short:
        return
    idx = np.array(short)
    rows = np.concatenate([np.arange(q_start[s], q_start[s + 1]) for s in short])
    sub_q = np.ascontiguousarray(q[rows])
    sub_out = np.empty_like(sub_q)
    sub_start = np.zeros(len(short) + 1, np.int32)
    sub_start[1:] = np.cumsum(lens[idx])
    _numba_attention(sub_out, sub_q, k_pages, v_pages, np.ascontiguousarray(block_tables[idx]), sub_start,
                     np.ascontiguousarray(pos_start[idx]), scale, window)  # fmt: skip
    out[rows] = sub_out
