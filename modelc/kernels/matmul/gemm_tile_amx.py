"""Q4_0 / Q8_0 / Q4_K (and Q6_K, repacked) matmul on Intel AMX int8 tiles (cpu.HAS_AMX), prefill included: from plan.AMX_MIN_T tokens on
for weights in the file's layout, from plan.R16_AMX_MIN_T (160) for weights repacked for gemm_r16, whose kernel
is faster below that (this kernel's flat cost per block, below).

NOTE: the zmm tile (gemm_tile) spends ~4 vector ops per (row, token, 64
elements), so its cost grows with T. Here, per 16-row panel of W and
32-element block, dword gathers (4 per Q4_0 block, 8 per Q8_0 block or Q4_K
sub-block pair) put the block's codes of the 16 rows into an AMX B tile (VNNI
layout); the activations of up to 16 tokens are the A tile, loaded from a tiled
copy of xq (`tile_act`: each (16 tokens, block) A tile in 512 contiguous bytes); one
`tdpbsud` (Q8_0, and Q6_K from codes minus 32: `tdpbssd`) gives all tokens x 16 rows of integer dots, and the
vector units only scale each token's 16-row result into accumulators held in
registers for the whole row of blocks (`scale_acc16`: a convert and two or three
float ops; Q4_0's -8 offset and Q4_K's mins use the activation sums xs). So the
cost is a flat part per weight block (gathers, tile ops) plus ~3 vector ops per
token. Two sets of tiles alternate so block b+1's dot runs while block b is
scaled (four sets, block b+3's dot issued before block b is scaled, measured no faster: the 8B's Q4_K shapes at 512
tokens 24.8 / 85.1 / 84.3 ms against 24.5 / 83.0 / 79.9, docs/benchmarks.md, issue 42, 2026-12-07 late morning). The tokens go through the panels in blocks of about TOKEN_BLOCK_BYTES of
activations, which stay in L2 while every panel reads them. Measured gains over the zmm tile: see plan.AMX_MIN_T. The
flat part (~100 cycles per 16 rows x 32-block) is most of the cost at small T;
for a weight repacked for gemm_r16 (`qmatmul_amx_r16`, plan.Path.AMX_R16) the B tiles
come from the repacked copy, whose code chunks are already the VNNI layout (a load
or two nibble masks instead of a gather), and the file's bytes stay unread, so one
copy of the weights is resident. Same numbers as gemm_tile up to float summation
order; numpy twin: ref_linear.matmul_qact.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from modelc.kernels.matmul.gemm_r16_parts import _scale_min
from modelc.kernels.matmul.gemm_r16_q6k import load_s8_i32x16
from modelc.kernels.simd.qdot import load_f16x16, load_f32x16, mul_f32x16
from modelc.kernels.simd.qdot_r16 import bits_i32x16, float_i32x16, load_u32x16, or_shl_i32x16
from modelc.kernels.simd.qdot_tile import (
    amx_config,
    amx_dot1,
    amx_dot2,
    amx_release,
    f16_strided_f32x16,
    load_rows_f32x16x16,
    nib_vnni16,
    q4_0_vnni16,
    q4_k_scales16,
    q8_0_vnni16,
    scale_acc16,
    scale_acc16_pair,
    store_f32x16,
    store_f32x16x16,
    store_i32x16,
    store_rows_f32x16x16,
    sub_u8_i32x16,
    zeros_f32x16x16,
)


def config(tm: int) -> np.ndarray:
    """Tile config for tm tokens: C tiles 0, 1 (tm x 64 B), A tiles 2, 3 (tm x 32 B: activations),
    B tiles 4, 5 (8 x 64 B: 16 weight rows' 32-block in VNNI layout)."""
    cfg = np.zeros(64, np.uint8)
    cfg[0] = 1
    for tile, rows, colsb in ((0, tm, 64), (1, tm, 64), (2, tm, 32), (3, tm, 32), (4, 8, 64), (5, 8, 64)):
        cfg[16 + 2 * tile] = colsb
        cfg[48 + tile] = rows
    return cfg


def config_q6_k(tm: int) -> np.ndarray:
    """Tile config for Q6_K's half-block dots (amx_dot2): C tiles 0, 1 (set 0's halves) and 2, 3 (set 1's), tm x
    64 B; A tiles 4, 6 (tm x 16 B: 16 activation bytes), B tiles 5, 7 (4 x 64 B: 16 weight rows' 16 elements)."""
    cfg = np.zeros(64, np.uint8)
    cfg[0] = 1
    for tile, rows, colsb in ((0, tm, 64), (1, tm, 64), (2, tm, 64), (3, tm, 64), (4, tm, 16), (5, 4, 64), (6, tm, 16),
                              (7, 4, 64)):  # fmt: skip
        cfg[16 + 2 * tile] = colsb
        cfg[48 + tile] = rows
    return cfg


_CFG = [config(tm) if tm else None for tm in range(17)]
_CFG_Q6_K = [config_q6_k(tm) if tm else None for tm in range(17)]
Q6_K = 9  # quant.KIND[DataType.Q6_K]: only from gemm_r16's repacked copy (amx_r16_q6_k)


@njit(cache=True, nogil=True, inline="always")
def _post(kind, accs, cbuf, co, ds, ms, bl, dxs, nxs, b, t16, t0):
    """Block b's 16 tokens x 16 rows result at cbuf[co:] scaled into the register-held accumulators accs: its
    scales (and mins) at ds[16 bl:] (ms), bl = b - the first block of the panel's K chunk; token j's activation
    terms at dxs[b * t16 + t0 + j], nxs[...] (Q6_K: each half's scales at ds[16 (2 bl + h):], its results at
    cbuf[co + 256 h:], no activation term: its codes are signed)."""
    ko = b * t16 + t0
    if kind == Q6_K:
        return scale_acc16_pair(accs, cbuf, co, load_f32x16(ds, 32 * bl), load_f32x16(ds, 32 * bl + 16), dxs, ko)
    dv = load_f32x16(ds, bl * 16)
    if kind == 7:
        return scale_acc16(accs, cbuf, co, dv, dxs, ko, load_f32x16(ms, bl * 16), nxs)
    if kind == 0:
        return scale_acc16(accs, cbuf, co, dv, dxs, ko, None, nxs)
    return scale_acc16(accs, cbuf, co, dv, dxs, ko, None, None)


@njit(cache=True, nogil=True, inline="always")
def _dot(kind, set_, xqf, ao, c, bw, bo, cbuf):
    """Tile set 0 (C 0, A 2, B 4) or 1 (C 1, A 3, B 5): cbuf[256 * set_:] = tokens x 16 rows. Q6_K: set 0 (C 0 and
    1, A 4, B 5) or 1 (C 2 and 3, A 6, B 7), each half of the block into its own C tile: cbuf[512 * set_:]."""
    if kind == Q6_K:  # signed codes (tdpbssd)
        if set_ == 0:
            amx_dot2(0, 1, 4, 5, xqf, ao, c, bw, bo, cbuf, 0, 0)
        else:
            amx_dot2(2, 3, 6, 7, xqf, ao, c, bw, bo, cbuf, 512, 0)
    elif set_ == 0:
        if kind != 4:
            amx_dot1(0, 2, 4, xqf, ao, c, bw, bo, cbuf, 0, 1)
        else:
            amx_dot1(0, 2, 4, xqf, ao, c, bw, bo, cbuf, 0, 0)
    elif kind != 4:
        amx_dot1(1, 3, 5, xqf, ao, c, bw, bo, cbuf, 256, 1)
    else:
        amx_dot1(1, 3, 5, xqf, ao, c, bw, bo, cbuf, 256, 0)


@njit(cache=True, nogil=True, inline="always")
def _prep_q4_k(bw, ds, ms, src, base, nbytes, ka, kb):
    """B tiles, sub-block scales and mins of the 16 rows' Q4_K sub-blocks ka..kb-1 (whole super-blocks; rows at byte
    base, stride nbytes), stored from index 0 on."""
    for sb in range(ka // 8, kb // 8):
        o = base + sb * 144
        r = sb * 8 - ka
        sc = q4_k_scales16(src, o, nbytes)
        for j in range(8):
            store_f32x16(ds, (r + j) * 16, sc[j])
            store_f32x16(ms, (r + j) * 16, sc[8 + j])
        for p in range(4):  # sub-blocks 2p (low nibbles) and 2p + 1 (high) share 32 bytes
            v = nib_vnni16(src, o + 16 + p * 32, nbytes)
            for k in range(16):
                store_i32x16(bw, ((r + 2 * p) * 8 + k) * 16, v[k])


@njit(cache=True, nogil=True, inline="always")
def _panel(kind, out, wf, r0, n, nbytes, nb, ka, kb, xqf, c, ta, tb, dxs, nxs, cfg_full, cfg_last):
    """Output rows r0..r0+15 (those < n) for tokens ta..tb-1 over blocks ka..kb-1 (the first K chunk starts the sums,
    later ones add to out), activations as the A tile (one row per token) and the panel's 16 weight rows as the B
    tile, so a block's result is scaled with 3 vector ops per token. kind (a constant): 0 Q4_0 (unsigned codes,
    tdpbsud, nxs the -8 offset), 4 Q8_0 (signed codes, tdpbssd, nxs zeros), 7 Q4_K (unsigned codes, nxs = -(block
    code sums * xd), times the sub-block mins; nb counts 32-element sub-blocks)."""
    bsize = 18 if kind == 0 else 34
    rows = min(16, n - r0)
    src = wf
    base = r0 * nbytes
    if rows < 16:  # the last panel: copy its rows so the gathers stay in bounds
        src = np.zeros(16 * nbytes, np.uint8)
        src[: rows * nbytes] = wf[base : base + rows * nbytes]
        base = 0
    kn = kb - ka
    bw = np.empty(kn * 128, np.int32)
    ds = np.empty(kn * 16, np.float32)
    ms = np.zeros(kn * 16 if kind == 7 else 16, np.float32)
    if kind == 7:
        _prep_q4_k(bw, ds, ms, src, base, nbytes, ka, kb)
    else:
        for b in range(ka, kb):
            o = base + b * bsize
            v = q4_0_vnni16(src, o, nbytes) if kind == 0 else q8_0_vnni16(src, o, nbytes)
            for k in range(8):
                store_i32x16(bw, ((b - ka) * 8 + k) * 16, v[k])
            store_f32x16(ds, (b - ka) * 16, f16_strided_f32x16(src, o, nbytes))
    _tiles(kind, out, r0, rows, nb, ka, kb, xqf, c, ta, tb, dxs, nxs, cfg_full, cfg_last, bw, ds, ms)


@njit(cache=True, nogil=True, inline="always")
def _tiles(kind, out, r0, rows, nb, ka, kb, xqf, c, ta, tb, dxs, nxs, cfg_full, cfg_last, bw, ds, ms):
    """Output rows r0..r0+rows-1 for tokens ta..tb-1 (ta a multiple of 16) over blocks ka..kb-1, from one panel's B
    tiles (bw), scales (ds) and mins (ms) of those blocks: ka = 0 writes out, later K chunks add their sums to it."""
    cbuf = np.zeros(1024, np.int32)
    acc = np.empty(256, np.float32)
    t16 = dxs.size // nb  # tokens padded to whole tiles: dxs (nb, t16), 0 past t
    n = out.shape[1]
    of = out.reshape(-1)
    co1 = 512 if kind == Q6_K else 256
    for tt in range(ta // 16, (tb + 15) // 16):
        t0 = tt * 16
        tm = min(16, tb - t0)
        whole = tm == 16 and rows == 16
        amx_config(cfg_full if tm == 16 else cfg_last)
        if ka == 0:
            accs = zeros_f32x16x16()
        elif whole:
            accs = load_rows_f32x16x16(of, t0 * n + r0, n)
        else:
            acc[:] = 0.0
            for j in range(tm):
                for m in range(rows):
                    acc[j * 16 + m] = out[t0 + j, r0 + m]
            accs = load_rows_f32x16x16(acc, 0, 16)
        _dot(kind, 0, xqf, (tt * nb + ka) * 512, 32, bw, 0, cbuf)
        for b in range(ka, kb, 2):
            bl = b - ka
            if b + 1 < kb:
                _dot(kind, 1, xqf, (tt * nb + b + 1) * 512, 32, bw, (bl + 1) * 128, cbuf)
            accs = _post(kind, accs, cbuf, 0, ds, ms, bl, dxs, nxs, b, t16, t0)
            if b + 2 < kb:
                _dot(kind, 0, xqf, (tt * nb + b + 2) * 512, 32, bw, (bl + 2) * 128, cbuf)
            if b + 1 < kb:
                accs = _post(kind, accs, cbuf, co1, ds, ms, bl + 1, dxs, nxs, b + 1, t16, t0)
        if whole:
            store_rows_f32x16x16(of, t0 * n + r0, n, accs)
        else:
            store_f32x16x16(acc, 0, accs)
            for j in range(tm):
                for m in range(rows):
                    out[t0 + j, r0 + m] = acc[j * 16 + m]
    amx_release()


@njit(cache=True, nogil=True)
def _panel_q4_0(out, wf, r0, n, nbytes, nb, ka, kb, xqf, c, ta, tb, dxs, nxs, cfg_full, cfg_last):
    _panel(0, out, wf, r0, n, nbytes, nb, ka, kb, xqf, c, ta, tb, dxs, nxs, cfg_full, cfg_last)


@njit(cache=True, nogil=True)
def _panel_q8_0(out, wf, r0, n, nbytes, nb, ka, kb, xqf, c, ta, tb, dxs, nxs, cfg_full, cfg_last):
    _panel(4, out, wf, r0, n, nbytes, nb, ka, kb, xqf, c, ta, tb, dxs, nxs, cfg_full, cfg_last)


@njit(cache=True, nogil=True)
def _panel_q4_k(out, wf, r0, n, nbytes, nb, ka, kb, xqf, c, ta, tb, dxs, nxs, cfg_full, cfg_last):
    _panel(7, out, wf, r0, n, nbytes, nb, ka, kb, xqf, c, ta, tb, dxs, nxs, cfg_full, cfg_last)


@njit(cache=True, nogil=True, parallel=True)
def amx_q4_0(out, w, xq, xt, dxs, nxs, nb, cfg_full, cfg_last, tblk, kblk):
    """out (T, N) f32 = dequant(w) @ x.T for Q4_0 w (N, nb * 18) uint8 C-contig, xq (T, C) int8.

    parallel=True: 16-row panels are independent. dxs, nxs: _act_terms (block-major, tokens padded to whole
    tiles); cfg_full / cfg_last: config(16) / config(T mod 16); tblk tokens and kblk blocks a pass (`blocks`).
    amx_q8_0: the same for Q8_0 (nxs zeros).
    """
    t, c = xq.shape
    n, nbytes = w.shape
    wf = w.reshape(-1)
    xqf = xt.reshape(-1)
    for ta in range(0, t, tblk):
        for ka in range(0, nb, kblk):
            kb = min(nb, ka + kblk)
            for p in prange((n + 15) // 16):
                _panel_q4_0(out, wf, p * 16, n, nbytes, nb, ka, kb, xqf, c, ta, min(t, ta + tblk), dxs, nxs, cfg_full,
                            cfg_last)  # fmt: skip


@njit(cache=True, nogil=True, parallel=True)
def amx_q8_0(out, w, xq, xt, dxs, nxs, nb, cfg_full, cfg_last, tblk, kblk):
    t, c = xq.shape
    n, nbytes = w.shape
    wf = w.reshape(-1)
    xqf = xt.reshape(-1)
    for ta in range(0, t, tblk):
        for ka in range(0, nb, kblk):
            kb = min(nb, ka + kblk)
            for p in prange((n + 15) // 16):
                _panel_q8_0(out, wf, p * 16, n, nbytes, nb, ka, kb, xqf, c, ta, min(t, ta + tblk), dxs, nxs, cfg_full,
                            cfg_last)  # fmt: skip


@njit(cache=True, nogil=True, parallel=True)
def amx_q4_k(out, w, xq, xt, dxs, nxs, nb, cfg_full, cfg_last, tblk, kblk):
    t, c = xq.shape
    n, nbytes = w.shape
    wf = w.reshape(-1)
    xqf = xt.reshape(-1)
    for ta in range(0, t, tblk):
        for ka in range(0, nb, kblk):
            kb = min(nb, ka + kblk)
            for p in prange((n + 15) // 16):
                _panel_q4_k(out, wf, p * 16, n, nbytes, nb, ka, kb, xqf, c, ta, min(t, ta + tblk), dxs, nxs, cfg_full,
                            cfg_last)  # fmt: skip


@njit(cache=True, nogil=True, inline="always")
def _prep_r16_q6_k(bw, ds, rf, base, ka, kb):
    """_prep_r16 for Q6_K (gemm_r16_q6k's layout): per 32-element block, the B tile rows of its 6-bit codes minus 32
    (-32..31, signed: tdpbssd, so the integer dot holds the whole q - 32 and the scaling needs no activation term)
    and the d * scale of its two 16-element halves (ds[16 (2 bl + h):]). Row k of block (h, m) of a super-block (elements 128 h + 32 m + 4k..4k+3: chunk k of the half's runs)
    is ql's nibble (low for m < 2, high for m >= 2; ql's first 32 bytes for even m, its last for odd) | qh's bits
    2m, 2m+1 << 4."""
    for sb in range(ka // 8, kb // 8):
        o = base + sb * 3360
        r = sb * 8 - ka
        d = load_f16x16(rf, o)
        for s in range(16):
            store_f32x16(ds, (2 * r + s) * 16, mul_f32x16(d, float_i32x16(load_s8_i32x16(rf, o + 32 + 16 * s))))
        for h in range(2):
            q = o + 288 + 1536 * h
            for k in range(8):
                qh = load_u32x16(rf, q + 64 * k)
                lo = load_u32x16(rf, q + 512 + 64 * k)
                hi = load_u32x16(rf, q + 1024 + 64 * k)
                b = (r + 4 * h) * 128 + k * 16  # block m = 0 of the half
                store_i32x16(bw, b, _six(lo, 0, qh, 0))
                store_i32x16(bw, b + 128, _six(hi, 0, qh, 2))
                store_i32x16(bw, b + 256, _six(lo, 4, qh, 4))
                store_i32x16(bw, b + 384, _six(hi, 4, qh, 6))


@njit(cache=True, nogil=True, inline="always")
def _six(ql, s, qh, sh):
    """Q6_K's codes minus 32 in each byte (-32..31): the nibble of ql at bit s | qh's two bits at sh, << 4, - 32."""
    return sub_u8_i32x16(or_shl_i32x16(bits_i32x16(ql, s, 0x0F0F0F0F), bits_i32x16(qh, sh, 0x03030303), 4), 32)


@njit(cache=True, nogil=True, inline="always")
def _prep_r16(kind, bw, ds, ms, rf, base, ka, kb):
    """_panel's B tiles, scales (and Q4_K's mins) of blocks ka..kb-1 from one 16-row group of gemm_r16's repacked copy
    at byte base, stored from index 0 on: its code chunks are already the VNNI layout (chunk k, lane r = row r's bytes
    4k..4k+3), so a B tile row is one load (Q8_0), or two nibble masks of one (Q4_0, Q4_K), where the file's layout
    takes a dword gather; Q6_K: _prep_r16_q6_k."""
    if kind == Q6_K:
        _prep_r16_q6_k(bw, ds, rf, base, ka, kb)
        return
    if kind == 7:
        for sb in range(ka // 8, kb // 8):
            o = base + sb * 2304
            r = sb * 8 - ka
            d = load_f16x16(rf, o)
            dm = load_f16x16(rf, o + 32)
            a = load_u32x16(rf, o + 64)
            m = load_u32x16(rf, o + 128)
            md = load_u32x16(rf, o + 192)
            for k in range(8):
                sc, mn = _scale_min(a, m, md, k)
                store_f32x16(ds, (r + k) * 16, mul_f32x16(d, float_i32x16(sc)))
                store_f32x16(ms, (r + k) * 16, mul_f32x16(dm, float_i32x16(mn)))
            for p in range(4):  # 64 elements: low nibbles = sub-block 2p, high nibbles = sub-block 2p + 1
                q = o + 256 + 512 * p
                lo = (r + 2 * p) * 128
                for k in range(8):
                    v = load_u32x16(rf, q + 64 * k)
                    store_i32x16(bw, lo + k * 16, bits_i32x16(v, 0, 0x0F0F0F0F))
                    store_i32x16(bw, lo + 128 + k * 16, bits_i32x16(v, 4, 0x0F0F0F0F))
        return
    bb = 288 if kind == 0 else 544
    for b in range(ka, kb):
        o = base + b * bb
        bl = b - ka
        store_f32x16(ds, bl * 16, load_f16x16(rf, o))
        if kind == 0:  # tile rows 0-3: low nibbles (elements 4k..4k+3), 4-7: high nibbles (16 + 4k..)
            for k in range(4):
                v = load_u32x16(rf, o + 32 + 64 * k)
                store_i32x16(bw, (bl * 8 + k) * 16, bits_i32x16(v, 0, 0x0F0F0F0F))
                store_i32x16(bw, (bl * 8 + 4 + k) * 16, bits_i32x16(v, 4, 0x0F0F0F0F))
        else:
            for k in range(8):
                store_i32x16(bw, (bl * 8 + k) * 16, load_u32x16(rf, o + 32 + 64 * k))


@njit(cache=True, nogil=True, inline="always")
def _group_bytes(kind, nb):
    """Bytes of one 16-row group of gemm_r16's repacked copy with nb 32-element blocks a row."""
    if kind == 7:
        return (nb // 8) * 2304
    if kind == Q6_K:
        return (nb // 8) * 3360
    return nb * (288 if kind == 0 else 544)


@njit(cache=True, nogil=True, inline="always")
def _panel_r16(kind, out, rf, gi, nb, ka, kb, xqf, c, ta, tb, dxs, nxs, cfg_full, cfg_last):
    """_panel for rows 16 gi .. 16 gi + 15 of a weight repacked for gemm_r16 (rf: its flat bytes), blocks ka..kb-1."""
    kn = kb - ka
    bw = np.empty(kn * 128, np.int32)
    ds = np.empty(kn * (32 if kind == Q6_K else 16), np.float32)
    ms = np.zeros(kn * 16 if kind == 7 else 16, np.float32)
    _prep_r16(kind, bw, ds, ms, rf, gi * _group_bytes(kind, nb), ka, kb)
    _tiles(kind, out, gi * 16, 16, nb, ka, kb, xqf, c, ta, tb, dxs, nxs, cfg_full, cfg_last, bw, ds, ms)


@njit(cache=True, nogil=True, inline="always")
def _panels_r16(kind, out, rw, xq, xt, dxs, nxs, nb, cfg_full, cfg_last, tblk, kblk):
    """Every 16-row group of rw, in parallel, tblk tokens and kblk blocks a pass (inlined into each kind's entry, so
    `kind` stays a constant)."""
    t, c = xq.shape
    rf = rw.reshape(-1)
    xqf = xt.reshape(-1)
    for ta in range(0, t, tblk):
        for ka in range(0, nb, kblk):
            kb = min(nb, ka + kblk)
            for gi in prange(rw.shape[0]):
                _panel_r16(kind, out, rf, gi, nb, ka, kb, xqf, c, ta, min(t, ta + tblk), dxs, nxs, cfg_full, cfg_last)


@njit(cache=True, nogil=True, parallel=True)
def amx_r16_q4_0(out, rw, xq, xt, dxs, nxs, nb, cfg_full, cfg_last, tblk, kblk):
    """amx_q4_0 on gemm_r16's repacked copy rw (N/16, C/32 * 288) uint8 instead of the file's blocks (the same
    numbers): a model that prefills on AMX needs no second copy of its weights in memory. amx_r16_q8_0 (rw
    (N/16, C/32 * 544)), amx_r16_q4_k ((N/16, C/256 * 2304), nb counts 32-element sub-blocks) and amx_r16_q6_k
    ((N/16, C/256 * 3360); two K = 16 dots a block, config_q6_k) alike."""
    _panels_r16(0, out, rw, xq, xt, dxs, nxs, nb, cfg_full, cfg_last, tblk, kblk)


@njit(cache=True, nogil=True, parallel=True)
def amx_r16_q8_0(out, rw, xq, xt, dxs, nxs, nb, cfg_full, cfg_last, tblk, kblk):
    _panels_r16(4, out, rw, xq, xt, dxs, nxs, nb, cfg_full, cfg_last, tblk, kblk)


@njit(cache=True, nogil=True, parallel=True)
def amx_r16_q4_k(out, rw, xq, xt, dxs, nxs, nb, cfg_full, cfg_last, tblk, kblk):
    _panels_r16(7, out, rw, xq, xt, dxs, nxs, nb, cfg_full, cfg_last, tblk, kblk)


@njit(cache=True, nogil=True, parallel=True)
def amx_r16_q6_k(out, rw, xq, xt, dxs, nxs, nb, cfg_full, cfg_last, tblk, kblk):
    _panels_r16(Q6_K, out, rw, xq, xt, dxs, nxs, nb, cfg_full, cfg_last, tblk, kblk)


def _act_terms(xd: np.ndarray, xs: np.ndarray, kind: int) -> tuple[np.ndarray, np.ndarray]:
    """dxs, nxs (nb * t16,): each block's activation scale and term, block-major with the tokens padded to whole
    tiles of 16 (t16; zeros past T), so a tile's 16 tokens are contiguous. The term is -8 (Q4_0) or -1 (Q4_K:
    times the mins) times the block's activation sum; none for Q8_0 and Q6_K (signed codes: nxs empty, unread)."""
    t, nb = xd.shape
    t16 = (t + 15) // 16 * 16
    dxs = np.zeros((nb, t16), np.float32)
    dxs[:, :t] = xd.T
    signed = kind in (4, Q6_K)
    nxs = np.zeros((nb, t16) if not signed else 0, np.float32)
    if not signed:
        nxs[:, :t] = (np.float32(-8.0 if kind == 0 else -1.0) * (xs[:, 0::2] + xs[:, 1::2])).T
    return dxs.reshape(-1), nxs.reshape(-1)


@njit(cache=True, nogil=True, parallel=True)
def tile_act(xq, t16):
    """xq (T, C) int8 -> (t16 / 16, C / 32, 16, 32) int8: each (token tile, block)'s A tile in 512 contiguous bytes
    (loaded with a 32-byte row stride), rows past T zero. Rows of the (T, C) layout lie C bytes apart, so a tile's 16
    rows fell in one or two L1 sets (C = 4096, 14336): 8B shapes at 512 tokens ran 1.2-1.4x faster tiled."""
    t, c = xq.shape
    nb = c // 32
    xt = np.empty((t16 // 16, nb, 16, 32), np.int8)
    for i in prange(t16):
        tt, j = i // 16, i % 16
        for b in range(nb):
            if i < t:
                xt[tt, b, j, :] = xq[i, b * 32 : b * 32 + 32]
            else:
                xt[tt, b, j, :] = 0
    return xt


def _configs(t: int, kind: int) -> tuple[np.ndarray, np.ndarray]:
    cfg = _CFG_Q6_K if kind == Q6_K else _CFG
    return cfg[16], (cfg[t % 16] if t % 16 else cfg[16])


TOKEN_BLOCK_BYTES = 1 << 20
"""The activation rows one pass over the weight's panels reads (tokens x K chunk int8 bytes): they stay in the core's
L2 while every panel runs its tiles on them. Unblocked, each 16-row panel streamed all T tokens' rows from L3 (7.3 MB
at T = 512, C = 14336), which bound the kernel: 8B shapes at 512 tokens, docs/benchmarks.md, "Quiet measurements"."""

K_BLOCK = 128
"""At most this many 32-element blocks (4096 columns) a pass over the panels: wider weights (an 8B's down projection,
C = 14336) are cut into K chunks of whole super-blocks, the later chunks adding to out. Unchunked, a token block of
such a weight was only 64 tokens (TOKEN_BLOCK_BYTES / C), so each panel's B tiles were prepared again for every 64
tokens, 4x as often as at C = 4096, and the down projection ran ~1.4x the time of gate / up at the same work."""


def blocks(t: int, c: int) -> tuple[int, int]:
    """(tokens, 32-element blocks) a pass over the panels takes: K chunks of at most K_BLOCK blocks, as even as whole
    super-blocks allow (a multiple of 8), then TOKEN_BLOCK_BYTES of their activations (token_block)."""
    nb = c // 32
    chunks = -(-nb // max(8, K_BLOCK))
    kblk = min(nb, (-(-nb // chunks) + 7) // 8 * 8)
    return token_block(t, kblk * 32), kblk


def token_block(t: int, c: int) -> int:
    """Tokens per pass over the panels (a multiple of 16): TOKEN_BLOCK_BYTES of activations of c columns, at least 16."""
    return max(16, min((t + 15) // 16 * 16, TOKEN_BLOCK_BYTES // c // 16 * 16))


_R16_ENTRY = {0: amx_r16_q4_0, 4: amx_r16_q8_0, 7: amx_r16_q4_k, Q6_K: amx_r16_q6_k}
R16_KINDS = frozenset(_R16_ENTRY)
"""Kinds qmatmul_amx_r16 runs (Q4_0, Q8_0, Q4_K, Q6_K); qmatmul_amx (the file's bytes): Q4_0, Q8_0, Q4_K."""


def qmatmul_amx_r16(out: np.ndarray, xq: np.ndarray, xd: np.ndarray, xs: np.ndarray, rw: np.ndarray, kind: int) -> None:
    """qmatmul_amx on gemm_r16's repacked copy rw of a Q4_0 (kind 0) / Q8_0 (4) / Q4_K (7) / Q6_K (9) weight
    (plan.Path.AMX_R16)."""
    t, c = xq.shape
    _R16_ENTRY[kind](
        out,
        rw,
        xq,
        tile_act(xq, (t + 15) // 16 * 16),
        *_act_terms(xd, xs, kind),
        c // 32,
        *_configs(t, kind),
        *blocks(t, c),
    )


def qmatmul_amx(out: np.ndarray, xq: np.ndarray, xd: np.ndarray, xs: np.ndarray, w: np.ndarray, kind: int) -> None:
    """gemm_int.qmatmul's contract for Q4_0 (kind 0) / Q8_0 (4) / Q4_K (7) weights on AMX (any T;
    plan.plan_matmul sends T >= plan.AMX_MIN_T, or plan.R16_AMX_MIN_T for repacked weights)."""
    entry = amx_q4_0 if kind == 0 else (amx_q8_0 if kind == 4 else amx_q4_k)
    t, c = xq.shape
    entry(
        out,
        w,
        xq,
        tile_act(xq, (t + 15) // 16 * 16),
        *_act_terms(xd, xs, kind),
        c // 32,
        *_configs(t, kind),
        *blocks(t, c),
    )
