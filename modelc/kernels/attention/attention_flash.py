"""Prefill attention in tiles (flash attention): a long chunk's causal attention without its T x L scores.

attention_blas scored a tile of 256 query rows against every position with sgemm ((G 256, L) floats: 32 MiB at
4096 positions for TinyLlama's group of 8), then ran a serial softmax over them and a second sgemm: on a 4096-token
TinyLlama prompt the last 512-token chunk's attention took 9.2 s of its 11.9 (2 threads, Emerald Rapids), 41
GFLOP/s. Here each work item is one KV head x a block of query rows, the G heads of the group x R rows = 64
query lanes (R = 64 / G), and walks the positions BK at a time: the block's K rows widened to f32 once, scores
S^T (BK positions x 64 lanes) from a 4 x 4 register tile (the lanes in vectors, each K element broadcast:
no horizontal sums), the running max / sum of each lane updated (online softmax), the output O^T (D x 64
lanes) rescaled and += V^T P^T from a 4-dim x 4-vector register tile. Working set ~3 x 64 D + 2 BK D
floats: it stays in L1 / L2, and memory grows linearly with the context (the scratch is per item, not per
position pair). Items (KV heads x query blocks, long and short blocks alternating) spread over numba's
threads.

Needs float32 or fp16 (uint16) pages (flash_prefill) or plain q8_0 pages (flash_prefill_q8: each block's rows
widened from int8 and their fp16 scales), D % 16 == 0 and a group size G dividing 64 (`supported`); the mixed
cache and other groups stay on attention_blas. Same contract as attention_blas.attention_one_seq_blas.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from modelc.kernels.attention.attention_rows import load_kv16
from modelc.kernels.attention.kv_q8 import dequant_row
from modelc.kernels.simd.fastexp import exp_weight
from modelc.kernels.simd.qdot import fma_f32x16, load_f32x16, splat_f32x16, store_f32x16, zeros_f32x16

LANES = 64
"""Query lanes of an item (4 vectors of 16): the G heads of a KV head x 64 / G rows."""
BK = 16
"""Positions per key block (scores tile BK x LANES)."""
NEG = np.float32(-3.0e38)
"""A masked score (finite: a lane with every position so far masked keeps max NEG and exp(NEG - NEG) = 1 stays
harmless, its sums are reset by the first real position's rescale factor exp(NEG - m) = 0)."""


def supported(q: np.ndarray, k_pages) -> bool:
    """Whether flash_prefill (dense f32 / fp16 pages) or flash_prefill_q8 (plain q8_0 pages: a QPages without a hot
    window) takes this chunk: D % 16 == 0, G | 64, q C-contiguous."""
    if isinstance(k_pages, tuple):  # kv_q8.QPages
        if k_pages.window != 0:
            return False
    elif not isinstance(k_pages, np.ndarray) or k_pages.dtype not in (np.float32, np.uint16):
        return False
    H, D = q.shape[1], q.shape[2]
    K = k_pages.shape[2]
    G = H // K
    return D % 16 == 0 and G <= LANES and LANES % G == 0 and q.flags.c_contiguous


def prefill(out, q, k_pages, v_pages, table, pos0: int, scale: float, window: int) -> None:
    """flash_prefill or flash_prefill_q8 for these pages (`supported` said yes)."""
    if isinstance(k_pages, tuple):
        flash_prefill_q8(out, q, k_pages.data, k_pages.scales, v_pages.data, v_pages.scales, table, pos0, scale, window)
    else:
        flash_prefill(out, q, k_pages, v_pages, table, pos0, scale, window)


def _widen(buf, flat, scales, table, p0, nb, Z, K, kh, D):
    """buf[j] = the K (or V) row of position p0 + j, KV head kh, as float32 (j < nb); rows nb .. BK - 1 zeroed.
    flat: the pages as 1-D f32 / fp16 (scales unread) or int8 (scales: the fp16 block scales, 1-D). numba only."""
    raise NotImplementedError("numba only")


@overload(_widen, inline="always")
def _widen_impl(buf, flat, scales, table, p0, nb, Z, K, kh, D):
    if flat.dtype == types.int8:

        def widen_q8(buf, flat, scales, table, p0, nb, Z, K, kh, D):
            NB = scales.shape[0] * D // flat.shape[0]  # scales per row
            for j in range(nb):
                p = p0 + j
                row = (table[p // Z] * Z + p % Z) * K + kh
                dequant_row(buf[j], flat[row * D : (row + 1) * D], scales[row * NB : (row + 1) * NB])
            for j in range(nb, BK):
                buf[j, :] = 0.0

        return widen_q8

    def widen(buf, flat, scales, table, p0, nb, Z, K, kh, D):
        bf = buf.reshape(-1)
        for j in range(nb):
            p = p0 + j
            base = ((table[p // Z] * Z + p % Z) * K + kh) * D
            for c in range(0, D, 16):
                store_f32x16(bf, j * D + c, load_kv16(flat, base + c))
        for j in range(nb, BK):
            buf[j, :] = 0.0

    return widen


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _load4(f, o):
    """The 4 vectors of 16 lanes at f[o:o + 64]."""
    return load_f32x16(f, o), load_f32x16(f, o + 16), load_f32x16(f, o + 32), load_f32x16(f, o + 48)


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _store4(f, o, a0, a1, a2, a3):
    store_f32x16(f, o, a0)
    store_f32x16(f, o + 16, a1)
    store_f32x16(f, o + 32, a2)
    store_f32x16(f, o + 48, a3)


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, inline="always")
def _fma4(a0, a1, a2, a3, x0, x1, x2, x3, b):
    """(a_i + x_i * b) for the 4 lane vectors of a row of the tile."""
    return fma_f32x16(a0, x0, b), fma_f32x16(a1, x1, b), fma_f32x16(a2, x2, b), fma_f32x16(a3, x3, b)


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, inline="always")
def _scores(s, qt, kb, D):
    """s (BK, LANES) = kb (BK, D) @ qt (D, LANES): 4 positions x 4 lane vectors at a time (16 accumulators)."""
    sf, qf = s.reshape(-1), qt.reshape(-1)
    for j in range(0, BK, 4):
        a00 = a01 = a02 = a03 = a10 = a11 = a12 = a13 = zeros_f32x16()
        a20 = a21 = a22 = a23 = a30 = a31 = a32 = a33 = zeros_f32x16()
        k0, k1, k2, k3 = kb[j], kb[j + 1], kb[j + 2], kb[j + 3]
        for d in range(D):
            q0, q1, q2, q3 = _load4(qf, d * LANES)
            a00, a01, a02, a03 = _fma4(a00, a01, a02, a03, q0, q1, q2, q3, splat_f32x16(k0[d]))
            a10, a11, a12, a13 = _fma4(a10, a11, a12, a13, q0, q1, q2, q3, splat_f32x16(k1[d]))
            a20, a21, a22, a23 = _fma4(a20, a21, a22, a23, q0, q1, q2, q3, splat_f32x16(k2[d]))
            a30, a31, a32, a33 = _fma4(a30, a31, a32, a33, q0, q1, q2, q3, splat_f32x16(k3[d]))
        _store4(sf, j * LANES, a00, a01, a02, a03)
        _store4(sf, (j + 1) * LANES, a10, a11, a12, a13)
        _store4(sf, (j + 2) * LANES, a20, a21, a22, a23)
        _store4(sf, (j + 3) * LANES, a30, a31, a32, a33)


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, inline="always")
def _accumulate(ot, s, vb, D):
    """ot (D, LANES) += vb (BK, D).T @ s (BK, LANES): 4 dims x 4 lane vectors at a time (16 accumulators)."""
    of, sf = ot.reshape(-1), s.reshape(-1)
    for d in range(0, D, 4):
        o0, o1, o2, o3 = d * LANES, (d + 1) * LANES, (d + 2) * LANES, (d + 3) * LANES
        a00, a01, a02, a03 = _load4(of, o0)
        a10, a11, a12, a13 = _load4(of, o1)
        a20, a21, a22, a23 = _load4(of, o2)
        a30, a31, a32, a33 = _load4(of, o3)
        for j in range(BK):
            p0, p1, p2, p3 = _load4(sf, j * LANES)
            v = vb[j]
            a00, a01, a02, a03 = _fma4(a00, a01, a02, a03, p0, p1, p2, p3, splat_f32x16(v[d]))
            a10, a11, a12, a13 = _fma4(a10, a11, a12, a13, p0, p1, p2, p3, splat_f32x16(v[d + 1]))
            a20, a21, a22, a23 = _fma4(a20, a21, a22, a23, p0, p1, p2, p3, splat_f32x16(v[d + 2]))
            a30, a31, a32, a33 = _fma4(a30, a31, a32, a33, p0, p1, p2, p3, splat_f32x16(v[d + 3]))
        _store4(of, o0, a00, a01, a02, a03)
        _store4(of, o1, a10, a11, a12, a13)
        _store4(of, o2, a20, a21, a22, a23)
        _store4(of, o3, a30, a31, a32, a33)


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, inline="always")
def _softmax_step(s, m, lsum, ot, qpos, p0, nb, window, mask):
    """Mask block p0 .. p0 + nb - 1 where `mask` (causal, window, past nb; a block every lane sees whole skips
    it), fold it into each lane's running max m and sum lsum (rescaling ot's columns where the max grew), and
    leave s = exp(s - m) (0 where masked)."""
    D = ot.shape[0]
    alpha = np.empty(LANES, np.float32)
    for j in range(BK if mask else 0):
        p = p0 + j
        row = s[j]
        for ln in range(LANES):
            masked = j >= nb or p > qpos[ln] or (window > 0 and p <= qpos[ln] - window)
            row[ln] = NEG if masked else row[ln]
    for ln in range(LANES):
        bm = s[0, ln]
        for j in range(1, BK):
            bm = max(bm, s[j, ln])
        mn = max(m[ln], bm)
        alpha[ln] = exp_weight(m[ln] - mn) if m[ln] > NEG else np.float32(0.0)
        m[ln] = mn
    for j in range(BK):
        row = s[j]
        if mask:
            for ln in range(LANES):
                row[ln] = exp_weight(row[ln] - m[ln]) if row[ln] > NEG else np.float32(0.0)
        else:
            for ln in range(LANES):
                row[ln] = exp_weight(row[ln] - m[ln])
    for ln in range(LANES):
        tot = np.float32(0.0)
        for j in range(BK):
            tot += s[j, ln]
        lsum[ln] = lsum[ln] * alpha[ln] + tot
    for d in range(D):
        row = ot[d]
        for ln in range(LANES):
            row[ln] *= alpha[ln]


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True)
def _flash_item(out, q, kflat, ks, vflat, vs, table, pos0, scale, window, kh, qb, Z, K):
    """Rows qb R .. of the chunk, the G heads of KV head kh: their attention over positions up to their own."""
    n, H, D = q.shape
    G = H // K
    R = LANES // G
    r0 = qb * R
    nr = min(R, n - r0)
    qt = np.empty((D, LANES), np.float32)  # (D, lanes): lane g R + r is head kh G + g of row r0 + r, times scale
    qpos = np.empty(LANES, np.int64)
    for g in range(G):
        for r in range(R):
            rr = min(r, nr - 1)  # lanes past the chunk repeat its last row (computed, never written)
            ln = g * R + r
            qpos[ln] = pos0 + r0 + rr
            src = q[r0 + rr, kh * G + g]
            for d in range(D):
                qt[d, ln] = src[d] * scale
    m = np.full(LANES, NEG, np.float32)
    lsum = np.zeros(LANES, np.float32)
    ot = np.zeros((D, LANES), np.float32)
    s = np.empty((BK, LANES), np.float32)
    kb = np.empty((BK, D), np.float32)
    vb = np.empty((BK, D), np.float32)
    hi = pos0 + r0 + nr  # positions [lo, hi) reach some row of the block
    lo = 0
    if window > 0:
        lo = max(0, pos0 + r0 - window + 1)
    for p0 in range(lo, hi, BK):
        nb = min(BK, hi - p0)
        _widen(kb, kflat, ks, table, p0, nb, Z, K, kh, D)
        _scores(s, qt, kb, D)
        # every lane sees the whole block (its positions at or before the block's first row, no window)
        whole = window == 0 and nb == BK and p0 + BK - 1 <= pos0 + r0
        _softmax_step(s, m, lsum, ot, qpos, p0, nb, window, not whole)
        _widen(vb, vflat, vs, table, p0, nb, Z, K, kh, D)
        _accumulate(ot, s, vb, D)
    for g in range(G):
        for r in range(nr):
            ln = g * R + r
            inv = np.float32(1.0) / lsum[ln]
            dst = out[r0 + r, kh * G + g]
            for d in range(D):
                dst[d] = ot[d, ln] * inv


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, inline="always")
def _items(out, q, kflat, ks, vflat, vs, table, pos0, scale, window, Z, K):
    n, H, D = q.shape
    R = LANES // (H // K)
    nqb = (n + R - 1) // R
    sc = np.float32(scale)
    for item in prange(K * nqb):
        rr = item // K  # long and short blocks alternate, so a static split of the items is balanced
        qb = rr // 2 if rr % 2 == 0 else nqb - 1 - rr // 2
        _flash_item(out, q, kflat, ks, vflat, vs, table, pos0, sc, window, item % K, qb, Z, K)


# parallel=True (both entries): KV heads x query blocks are independent items, and a long chunk has many of them.
@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, parallel=True)
def flash_prefill(out, q, k_pages, v_pages, table, pos0, scale, window):
    """out (n, H, D) f32 = causal attention of q (n, H, D) f32 (C-contiguous, rows at positions pos0 ..) over one
    sequence's pages (P, Z, K, D) f32 / fp16, table (B,) int32 its block table; window > 0 limits each row to its
    last `window` positions. out must not alias q."""
    none = np.empty(0, np.uint16)
    _items(out, q, k_pages.reshape(-1), none, v_pages.reshape(-1), none, table, pos0, scale, window,
           k_pages.shape[1], k_pages.shape[2])  # fmt: skip


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, parallel=True)
def flash_prefill_q8(out, q, kq, ks, vq, vs, table, pos0, scale, window):
    """flash_prefill over plain q8_0 pages: kq, vq (P, Z, K, D) int8, ks, vs (P, Z, K, NB) uint16 fp16 scales (each
    block's rows widened as kv_q8.dequant_row widens them)."""
    _items(out, q, kq.reshape(-1), ks.reshape(-1), vq.reshape(-1), vs.reshape(-1), table, pos0, scale, window,
           kq.shape[1], kq.shape[2])  # fmt: skip
