"""Q4_0 / Q8_0 / Q4_K / Q6_K matmul on Intel AMX bf16 tiles (cpu.HAS_AMX_BF16) from gemm_r16's repacked copy: the
weights dequantized to bf16 once per pair of 16-row groups, the activations rounded to bf16 (not quantized to int8
blocks). plan.Path.AMX_BF16, opt-in (plan.AMX_BF16, MODELC_AMX_BF16=1).

NOTE: the int8 tiles (gemm_tile_amx) pay, per 32-element block and 16 tokens x 16 rows, for the block's own scales:
a tile store of the int32 result, its load back and two to four float ops a token row (about half their time, the
other half the tile ops). tdpbf16ps accumulates fp32 in the C tile over the whole K, so nothing is paid per block:
per 32 columns a step loads two A tiles (16 tokens x 32 bf16 each, from `act_bf16`'s tiled copy) and two B tiles
(16 weight rows' 32 columns as bf16 pairs) for four dots (2 token tiles x 2 groups), and the C tiles go straight to
`out` once per token pair. The B tiles of a pair of groups (2 x C / 32 KiB: 256 KiB at C = 4096, 896 KiB at 14336)
are made once from `gemm_tile_amx._prep_r16`'s int8 codes and scales (code x scale - min, rounded to bf16) and stay
in L2 while all tokens pass; the activations stream from L3. Numbers: ref_linear.matmul_bf16 (weights and
activations rounded to bf16, an fp32 product) up to float summation order.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from modelc.kernels.matmul.gemm_tile_amx import Q6_K, _group_bytes, _prep_r16
from modelc.kernels.simd.qdot import load_f32x16, mul_f32x16, splat_f32x16
from modelc.kernels.simd.qdot_tile import amx_config, amx_release, load_i32x16, store_i32x16
from modelc.kernels.simd.tile_bf16 import bf16_pair, tile_dpbf16, tile_load, tile_store, tile_zero

KINDS = frozenset({0, 4, 7, Q6_K})
"""Quant kinds (quant.KIND) with a repacked copy this kernel reads: Q4_0, Q8_0, Q4_K, Q6_K."""


def config() -> np.ndarray:
    """Tile config: every tile 16 rows x 64 bytes (C 0-3: fp32 16 x 16; A 4, 5: 16 tokens x 32 bf16; B 6, 7: 16
    pairs of columns x 16 weight rows)."""
    cfg = np.zeros(64, np.uint8)
    cfg[0] = 1
    for tile in range(8):
        cfg[16 + 2 * tile] = 64
        cfg[48 + tile] = 16
    return cfg


_CFG = config()


@njit(cache=True, nogil=True, parallel=True)
def act_bf16(xb, x):
    """xb (T32 / 16, C / 32, 16, 32) uint16 = x (T, C) f32 rounded to bf16 (nearest even), each (16 tokens, 32
    columns) A tile in 1 KiB contiguous; tokens T..T32 - 1 zero (T32: T rounded up to a multiple of 32)."""
    t, c = x.shape
    xu = x.view(np.uint32)
    for i in prange(xb.shape[0] * 16):
        tt, j = i // 16, i % 16
        for k in range(c):
            v = 0
            if i < t:
                u = np.int64(xu[i, k])
                v = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
            xb[tt, k // 32, j, k % 32] = v


@njit(cache=True, nogil=True, inline="always")
def _prep_bf16(kind, wb, wo, bw, ds, ms, nb):
    """bf16 B tiles of one group's nb blocks at wb[wo:] (256 int32 a block: 16 rows of column pairs x 16 weight
    rows) from _prep_r16's int8 tile rows bw (row k = columns 4k..4k+3), scales ds and mins ms: Q4_K code x scale -
    min, Q4_0 (code - 8) x scale, Q8_0 code x scale, Q6_K (code - 32: already signed) x its half's scale."""
    z = splat_f32x16(np.float32(0.0))
    for bl in range(nb):
        if kind == Q6_K:
            d0 = load_f32x16(ds, 32 * bl)
            d1 = load_f32x16(ds, 32 * bl + 16)
            m = z
        else:
            d0 = load_f32x16(ds, 16 * bl)
            d1 = d0
            if kind == 7:
                m = load_f32x16(ms, 16 * bl)
            elif kind == 0:
                m = mul_f32x16(d0, splat_f32x16(np.float32(8.0)))
            else:
                m = z
        o = wo + bl * 256
        for k in range(8):
            v = load_i32x16(bw, (bl * 8 + k) * 16)
            d = d0 if k < 4 else d1
            if kind == 4 or kind == Q6_K:
                store_i32x16(wb, o + 32 * k, bf16_pair(v, 0, d, m, 1))
                store_i32x16(wb, o + 32 * k + 16, bf16_pair(v, 2, d, m, 1))
            else:
                store_i32x16(wb, o + 32 * k, bf16_pair(v, 0, d, m, 0))
                store_i32x16(wb, o + 32 * k + 16, bf16_pair(v, 2, d, m, 0))


@njit(cache=True, nogil=True, inline="always")
def _pair(kind, out, rf, pp, groups, nb, xf, t, cbuf):
    """Output rows 32 pp .. 32 pp + 31 (16 where group 2 pp + 1 does not exist) for every token."""
    two = 2 * pp + 1 < groups
    wb = np.empty(2 * nb * 256, np.int32)
    bw = np.empty(nb * 128, np.int32)
    ds = np.empty(nb * (32 if kind == Q6_K else 16), np.float32)
    ms = np.zeros(nb * 16 if kind == 7 else 16, np.float32)
    gb = _group_bytes(kind, nb)
    for h in range(2 if two else 1):
        _prep_r16(kind, bw, ds, ms, rf, (2 * pp + h) * gb, 0, nb)
        _prep_bf16(kind, wb, h * nb * 256, bw, ds, ms, nb)
    n = out.shape[1]
    of = out.reshape(-1)
    r0 = 32 * pp
    amx_config(_CFG)
    for tt in range(0, (t + 31) // 32 * 2, 2):
        tile_zero(0)
        tile_zero(1)
        tile_zero(2)
        tile_zero(3)
        a0 = tt * nb * 512
        a1 = a0 + nb * 512
        for b in range(nb):
            tile_load(4, xf, a0 + b * 512, 64)
            tile_load(6, wb, b * 256, 64)
            tile_dpbf16(0, 4, 6)
            if two:
                tile_load(7, wb, (nb + b) * 256, 64)
                tile_dpbf16(1, 4, 7)
            tile_load(5, xf, a1 + b * 512, 64)
            tile_dpbf16(2, 5, 6)
            if two:
                tile_dpbf16(3, 5, 7)
        if (tt + 2) * 16 <= t:  # both token tiles whole: straight into out
            tile_store(0, of, tt * 16 * n + r0, 4 * n)
            tile_store(2, of, (tt + 1) * 16 * n + r0, 4 * n)
            if two:
                tile_store(1, of, tt * 16 * n + r0 + 16, 4 * n)
                tile_store(3, of, (tt + 1) * 16 * n + r0 + 16, 4 * n)
        else:  # the last, partial pair of token tiles: through cbuf (32 tokens x 32 rows)
            tile_store(0, cbuf, 0, 128)
            tile_store(2, cbuf, 512, 128)
            tile_store(1, cbuf, 16, 128)
            tile_store(3, cbuf, 528, 128)
            for j in range(tt * 16, t):
                for m in range(32 if two else 16):
                    out[j, r0 + m] = cbuf[(j - tt * 16) * 32 + m]
    amx_release()


@njit(cache=True, nogil=True, inline="always")
def _pairs(kind, out, rw, xb, t):
    groups = rw.shape[0]
    nb = xb.shape[1]
    rf = rw.reshape(-1)
    xf = xb.reshape(-1)
    for pp in prange((groups + 1) // 2):
        cbuf = np.empty(1024, np.float32)
        _pair(kind, out, rf, pp, groups, nb, xf, t, cbuf)


@njit(cache=True, nogil=True, parallel=True)
def amx_bf16_q4_0(out, rw, xb, t):
    """out (T, N) f32 = bf16(dequant(rw)) @ bf16(x).T for gemm_r16's repacked Q4_0 copy rw (N/16, C/32 * 288) uint8,
    xb: act_bf16(x) (T32 / 16, C / 32, 16, 32) uint16. parallel=True: pairs of 16-row groups are independent.
    amx_bf16_q8_0 / _q4_k / _q6_k: the same on those kinds' copies (gemm_tile_amx._group_bytes)."""
    _pairs(0, out, rw, xb, t)


@njit(cache=True, nogil=True, parallel=True)
def amx_bf16_q8_0(out, rw, xb, t):
    _pairs(4, out, rw, xb, t)


@njit(cache=True, nogil=True, parallel=True)
def amx_bf16_q4_k(out, rw, xb, t):
    _pairs(7, out, rw, xb, t)


@njit(cache=True, nogil=True, parallel=True)
def amx_bf16_q6_k(out, rw, xb, t):
    _pairs(Q6_K, out, rw, xb, t)


_ENTRY = {0: amx_bf16_q4_0, 4: amx_bf16_q8_0, 7: amx_bf16_q4_k, Q6_K: amx_bf16_q6_k}


def qmatmul_bf16_r16(out: np.ndarray, x: np.ndarray, rw: np.ndarray, kind: int) -> None:
    """out (T, N) f32 = x (T, C) f32 @ W.T on AMX bf16 tiles, W given as gemm_r16's repacked copy rw (N/16 groups) of
    a Q4_0 (kind 0) / Q8_0 (4) / Q4_K (7) / Q6_K (9) weight; where cpu.HAS_AMX_BF16 only. Weights and activations
    are rounded to bf16 (ref_linear.matmul_bf16), not the int8 blocks of plan.Path.AMX_R16: plan.Path.AMX_BF16, which
    plan.AMX_BF16 (opt-in) puts where AMX_R16 would run."""
    t, c = x.shape
    assert out.shape == (t, rw.shape[0] * 16), (out.shape, rw.shape)
    xb = np.empty(((t + 31) // 32 * 2, c // 32, 16, 32), np.uint16)
    act_bf16(xb, np.ascontiguousarray(x, dtype=np.float32))
    _ENTRY[kind](out, rw, xb, t)
