"""Prefill attention through BLAS: for a sequence with many query rows, QK^T and PV are sgemm calls.

Per KV head the G query heads of its group and a tile of rows form one (G*n, D) matrix,
so one sgemm scores them against the sequence's gathered K; a numba kernel applies the
causal (and sliding-window) mask with the softmax. Same contract as attention.paged_attention.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from modelc.kernels.simd.fastexp import exp_weight

# error_model="numpy": no zero-division branch, so the row loops vectorize (see norm.py).

ROW_TILE = 256  # query rows per sgemm: bounds the (G * rows, context) score matrix


# fastmath=True: the row max and sum are reductions, which LLVM vectorizes only when allowed to
# reassociate (sums differ from the ordered ones by ~1e-7 relative; checked against ref).
@njit(cache=True, nogil=True, error_model="numpy", fastmath=True)
def causal_softmax_rows(s, n, pos0, window):
    """In place: row r = g * n + i of s holds scores of the query at position pos0 + i.

    s: (G * n, L) float32 C-contiguous, L = pos0 + n. Columns outside [lo, pos0 + i]
    (lo = pos0 + i - window + 1 when window > 0, else 0) become 0; the rest a softmax.
    """
    R, L = s.shape
    for r in range(R):
        pos = pos0 + r % n
        lo = 0
        if window > 0 and pos - window + 1 > 0:
            lo = pos - window + 1
        # NOTE: index views with bare loop variables from 0: a computed start makes numba emit
        # negative-index wraparound checks, and those stop vectorization.
        row = s[r]
        seg = row[lo : pos + 1]
        m = seg[0]
        for j in range(seg.shape[0]):
            m = seg[j] if seg[j] > m else m
        tot = np.float32(0.0)
        for j in range(seg.shape[0]):
            e = exp_weight(seg[j] - m)
            seg[j] = e
            tot += e
        inv = np.float32(1.0) / tot
        for j in range(seg.shape[0]):
            seg[j] *= inv
        head = row[:lo]
        for j in range(head.shape[0]):
            head[j] = 0.0
        tail = row[pos + 1 :]
        for j in range(tail.shape[0]):
            tail[j] = 0.0


def _gather(pages: np.ndarray, table: np.ndarray, length: int) -> np.ndarray:
    """(length, K, D) float32 rows of one sequence from (P, Z, K, D) pages (or q8_0 QPages, dequantized)."""
    if isinstance(pages, tuple):  # kv_q8.QPages
        from modelc.kernels.attention.kv_q8 import gather_q8

        out = np.empty((length, *pages.data.shape[2:]), np.float32)  # (L, K, D)
        gather_q8(out, pages.data, pages.scales, np.ascontiguousarray(table, np.int32), length)
        return out
    Z = pages.shape[1]
    nb = (length + Z - 1) // Z
    rows = pages[table[:nb]].reshape(nb * Z, *pages.shape[2:])[:length]  # (L, K, D)
    return rows.view(np.float16).astype(np.float32) if rows.dtype == np.uint16 else rows


def attention_one_seq_blas(out, q, k_pages, v_pages, table, pos0, scale, window) -> None:
    """out (n, H, D) = causal attention of q (n, H, D) at positions pos0.. over the sequence's paged KV."""
    n, H, D = q.shape
    K = k_pages.shape[2]
    G = H // K
    L = pos0 + n
    keys = _gather(k_pages, table, L)  # (L, K, D)
    vals = _gather(v_pages, table, L)
    hot = _hot_rows(k_pages, v_pages, table, L)
    for kh in range(K):
        kk = np.ascontiguousarray(keys[:, kh, :])  # (L, D)
        vv = np.ascontiguousarray(vals[:, kh, :])
        for a in range(0, n, ROW_TILE):
            b = min(n, a + ROW_TILE)
            m = b - a
            qg = np.ascontiguousarray(q[a:b, kh * G : (kh + 1) * G, :].transpose(1, 0, 2)).reshape(G * m, D)
            s = qg @ kk[: pos0 + b].T  # (G * m, pos0 + b)
            band = None if hot is None else _hot_scores(s, qg, hot, kh, m, pos0 + a)
            s *= np.float32(scale)
            causal_softmax_rows(s, m, pos0 + a, window)
            o = s @ vv[: pos0 + b]  # (G * m, D)
            if band is not None:  # the mixed cache: hot rows' V in f32 = q8 part + (f32 - q8) correction
                c0, mask = band
                o += (s[:, c0:] * mask) @ (hot[1][c0 : pos0 + b, kh] - vv[c0 : pos0 + b])
            out[a:b, kh * G : (kh + 1) * G, :] = o.reshape(G, m, D).transpose(1, 0, 2)


def _hot_rows(k_pages, v_pages, table, length):
    """The mixed cache's f32 copies of a sequence's rows: (K rows, V rows, available) or None."""
    if not isinstance(k_pages, tuple) or k_pages.window <= 0:
        return None
    Z = k_pages.data.shape[1]
    p = np.arange(length)
    pages = np.asarray(table, np.int64)[p // Z]
    slot = k_pages.hot_of[pages]  # (L,)
    ok = slot >= 0
    kh = np.zeros((length, *k_pages.data.shape[2:]), np.float32)  # (L, K, D)
    vh = np.zeros_like(kh)
    kh[ok] = k_pages.hot[slot[ok], p[ok] % Z]
    vh[ok] = v_pages.hot[slot[ok], p[ok] % Z]
    return kh, vh, ok, int(k_pages.window)


def _hot_scores(s, qg, hot, kh, m, pos_a):
    """Overwrite s's scores with the f32 keys where the mixed rule reads f32: pos - p < window on a hot page.

    s: (G * m, pos_a + m) unscaled scores; rows r hold position pos_a + r % m. Returns (c0, mask)."""
    k_hot, _, ok, win = hot
    c0 = max(0, pos_a - win + 1)
    cols = np.arange(c0, s.shape[1])  # (B,)
    pos = pos_a + np.arange(s.shape[0]) % m  # (G * m,)
    mask = ok[cols][None, :] & (pos[:, None] - cols[None, :] < win) & (cols[None, :] <= pos[:, None])
    sh = qg @ k_hot[c0 : s.shape[1], kh].T  # (G * m, B)
    s[:, c0:] = np.where(mask, sh, s[:, c0:])
    return c0, mask.astype(np.float32)
