"""Q4_0 small-T matmul on Intel AMX int8 tiles (where qdot_tile.HAS_AMX), for MIN_T..31 tokens.

NOTE: the zmm tile (gemm_tile) spends ~4 vector ops per (row, token, 64
elements), so its cost grows with T. Here a 16-row panel of W is unpacked once
to signed codes (q - 8, natural order), and per 32-block one `tdpbssd`
computes all 16 rows x 16 tokens of integer dots; the vector units only scale
the 16 x 16 int32 result (convert, scale product, fma: 3 ops per row for all
16 tokens). Tokens are padded to 16 (one tile of columns per 16 tokens), so
the cost is flat in T up to 16. Left to do: the unpack and the per-row scaling
are now the cost (~200 cycles per 16 rows x 32-block); weights as the B tile
(VNNI layout by dword gathers straight from the blocks) would make the scaling
per token (T rows) instead of per 16 weight rows.
Activations are packed once per call into the tiles' VNNI layout (numpy).
Same numbers as gemm_tile up to float summation order; numpy twin:
ref_linear.matmul_qact.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from modelc.kernels.qdot import f16_at
from modelc.kernels.qdot_tile import (
    amx_config,
    amx_dot1,
    amx_release,
    f16_strided_f32x16,
    fmadot_f32x16,
    load_f32x16,
    load_i32x16,
    q4_0_pair,
    splat_f32x16,
    store_f32x16,
    store_i8x64_add,
    zeros_f32x16,
)

MIN_T = 9
"""From this many tokens on, Q4_0 runs here: the AMX cost is flat up to 16 tokens, the zmm
tile's grows with T; measured (one thread, 128 x 2048, L2-resident) 47 us here vs 25 / 45 /
92 us for the zmm tile at T = 4 / 8 / 16."""


def _config() -> np.ndarray:
    """Palette-1 tile config: C tiles 0, 1 (16 x 64 B), A tiles 2, 3 (16 x 32 B), B tiles 4, 5 (8 x 64 B)."""
    cfg = np.zeros(64, np.uint8)
    cfg[0] = 1
    for tile, rows, colsb in ((0, 16, 64), (1, 16, 64), (2, 16, 32), (3, 16, 32), (4, 8, 64), (5, 8, 64)):
        cfg[16 + 2 * tile] = colsb
        cfg[48 + tile] = rows
    return cfg


_CFG = _config()


@njit(cache=True, nogil=True, inline="always")
def _codes_panel(pl, cp, wf, r0, n, nbytes, nb):
    """Rows r0..r0+15 (past n: the last row again) -> signed codes q - 8 in natural element
    order, row m at pl[m * cp:] (cp = C rounded up to 64; an odd last block is written twice)."""
    for m in range(16):
        src = min(r0 + m, n - 1) * nbytes
        for g in range((nb + 1) // 2):
            o0 = src + 2 * g * 18
            o1 = o0 + 18 if 2 * g + 1 < nb else o0
            u, _s = q4_0_pair(wf, o0, o1)
            store_i8x64_add(pl, m * cp + g * 64, u, -8)


@njit(cache=True, nogil=True, inline="always")
def _post4(c, cbuf, co, m0, ds, nbp, b, x):
    """Rows m0..m0+3 of the 16 x 16 int32 tile result at cbuf[co:] into their accumulators."""
    return (
        fmadot_f32x16(c[0], load_i32x16(cbuf, co + m0 * 16), splat_f32x16(ds[m0 * nbp + b]), x),
        fmadot_f32x16(c[1], load_i32x16(cbuf, co + m0 * 16 + 16), splat_f32x16(ds[(m0 + 1) * nbp + b]), x),
        fmadot_f32x16(c[2], load_i32x16(cbuf, co + m0 * 16 + 32), splat_f32x16(ds[(m0 + 2) * nbp + b]), x),
        fmadot_f32x16(c[3], load_i32x16(cbuf, co + m0 * 16 + 48), splat_f32x16(ds[(m0 + 3) * nbp + b]), x),
    )


@njit(cache=True, nogil=True, inline="always")
def _post16(c0, c1, c2, c3, cbuf, co, ds, nbp, b, dxv, xo):
    x = load_f32x16(dxv, xo)
    c0 = _post4(c0, cbuf, co, 0, ds, nbp, b, x)
    c1 = _post4(c1, cbuf, co, 4, ds, nbp, b, x)
    c2 = _post4(c2, cbuf, co, 8, ds, nbp, b, x)
    c3 = _post4(c3, cbuf, co, 12, ds, nbp, b, x)
    return c0, c1, c2, c3


@njit(cache=True, nogil=True, inline="always")
def _store4(tmp, m0, c):
    store_f32x16(tmp, m0 * 16, c[0])
    store_f32x16(tmp, m0 * 16 + 16, c[1])
    store_f32x16(tmp, m0 * 16 + 32, c[2])
    store_f32x16(tmp, m0 * 16 + 48, c[3])


@njit(cache=True, nogil=True, inline="always")
def _scales(ds, nbp, wf, r0, n, nbytes, nb):
    """ds[m * nbp + b] = the fp16 scale of block b of row r0 + m (past n: the last row)."""
    nb16 = nb // 16 * 16
    for m in range(16):
        rb = min(r0 + m, n - 1) * nbytes
        for b in range(0, nb16, 16):
            store_f32x16(ds, m * nbp + b, f16_strided_f32x16(wf, rb + b * 18, 18))
        for b in range(nb16, nb):
            ds[m * nbp + b] = f16_at(wf, rb + b * 18)


@njit(cache=True, nogil=True)
def _panel_q4_0(out, wf, r0, n, nbytes, nb, bpack, dxv, t, cfg):
    """Output rows r0..r0+15 (those < n) for all T tokens. Blocks alternate between two sets of
    tiles (C/A/B 0,2,4 and 1,3,5), and block b+1's dot is issued before block b's result is
    scaled, so the two AMX chains and the vector work overlap."""
    cp = (nb + 1) // 2 * 64
    pl = np.empty(16 * cp, np.int8)
    cbuf = np.empty(512, np.int32)
    tmp = np.empty(256, np.float32)
    nbp = nb + 16
    ds = np.empty(16 * nbp, np.float32)
    _codes_panel(pl, cp, wf, r0, n, nbytes, nb)
    _scales(ds, nbp, wf, r0, n, nbytes, nb)
    amx_config(cfg)
    for tt in range((t + 15) // 16):
        z = zeros_f32x16()
        c0, c1, c2, c3 = (z, z, z, z), (z, z, z, z), (z, z, z, z), (z, z, z, z)
        bo = tt * nb * 512
        xo = tt * nb * 16
        amx_dot1(0, 2, 4, pl, 0, cp, bpack, bo, cbuf, 0)
        for b in range(0, nb, 2):
            if b + 1 < nb:
                amx_dot1(1, 3, 5, pl, (b + 1) * 32, cp, bpack, bo + (b + 1) * 512, cbuf, 256)
            c0, c1, c2, c3 = _post16(c0, c1, c2, c3, cbuf, 0, ds, nbp, b, dxv, xo + b * 16)
            if b + 2 < nb:
                amx_dot1(0, 2, 4, pl, (b + 2) * 32, cp, bpack, bo + (b + 2) * 512, cbuf, 0)
            if b + 1 < nb:
                c0, c1, c2, c3 = _post16(c0, c1, c2, c3, cbuf, 256, ds, nbp, b + 1, dxv, xo + (b + 1) * 16)
        _store4(tmp, 0, c0)
        _store4(tmp, 4, c1)
        _store4(tmp, 8, c2)
        _store4(tmp, 12, c3)
        for m in range(min(16, n - r0)):
            for j in range(min(16, t - tt * 16)):
                out[tt * 16 + j, r0 + m] = tmp[m * 16 + j]
    amx_release()


@njit(cache=True, nogil=True, parallel=True)
def amx_q4_0(out, w, bpack, dxv, t, nb, cfg):
    """out (T, N) f32 = dequant(w) @ x.T for Q4_0 w (N, nb * 18) uint8 C-contig.

    parallel=True: 16-row panels are independent; the caller sets the thread count.
    bpack (ceil(T/16) * nb * 512,) int8 and dxv (ceil(T/16) * nb * 16,) f32 from pack_act;
    cfg: _CFG. out written fully.
    """
    n, nbytes = w.shape
    wf = w.reshape(-1)
    for p in prange((n + 15) // 16):
        _panel_q4_0(out, wf, p * 16, n, nbytes, nb, bpack, dxv, t, cfg)


def pack_act(xq: np.ndarray, xd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Activations -> the B tiles (VNNI layout) and per-token block scales, tokens padded to 16.

    xq (T, C) int8, xd (T, C/32) f32 -> bpack (TT, nb, 8, 16) int32 words flattened to int8
    (row k of block b, column n = codes 4k..4k+3 of token n's block b), dxv (TT, nb, 16) f32.
    """
    t, c = xq.shape
    nb = c // 32
    tt = (t + 15) // 16
    words = np.zeros((tt * 16, nb, 8), np.int32)  # (16 TT, nb, 8)
    words[:t] = xq.view(np.int32).reshape(t, nb, 8)
    bpack = np.ascontiguousarray(words.reshape(tt, 16, nb, 8).transpose(0, 2, 3, 1))  # (TT, nb, 8, 16)
    d = np.zeros((tt * 16, nb), np.float32)  # (16 TT, nb)
    d[:t] = xd
    dxv = np.ascontiguousarray(d.reshape(tt, 16, nb).transpose(0, 2, 1))  # (TT, nb, 16)
    return bpack.reshape(-1).view(np.int8), dxv.reshape(-1)


def qmatmul_amx_q4_0(out: np.ndarray, xq: np.ndarray, xd: np.ndarray, w: np.ndarray) -> None:
    """gemm_int.qmatmul's contract for Q4_0 weights on AMX."""
    bpack, dxv = pack_act(xq, xd)
    amx_q4_0(out, w, bpack, dxv, xq.shape[0], xq.shape[1] // 32, _CFG)
