"""Quantized matmul with int8 activations: out (T, N) = x (T, C) @ W.T, W stored in blocks.

qmatmul sends Q4_0, Q8_0, Q4_K and Q6_K to the register-tiled kernel in
gemm_tile.py (Q4_0 / Q8_0 / Q4_K with a few tokens or more to AMX tiles, gemm_tile_amx.py, where the CPU
has them: plan.int8_path); qmatmul_rows below serves every other type.

NOTE: in qmatmul_rows each weight row is unpacked ONCE (quant.unpack_row: int8 + per-16 scales,
L1-resident) and then dotted with all T activation rows, which were quantized
once per call to Q8_0-style blocks (quant.quantize_act). So a batch of 16 costs
far less than 16 single-token calls. The block dot is qdot.dotu_i8x32 (one
vpdpbusd with AVX-VNNI). The numpy twin is ref_linear.matmul_qact.
(numba caches this module's kernels with quant.unpack_row and quant_iq.unpack_iq compiled in; an
edit to any kernel file starts a fresh cache folder: kernels/runtime/jit_cache.py.)
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from modelc.kernels.matmul import gemm_tile, gemm_tile_amx, plan
from modelc.kernels.quant.quant import unpack_row
from modelc.kernels.simd.qdot import (
    abs_i8x32,
    dot_i8x32,
    dotu_i8x32,
    fma_f32x8,
    fma_i32x8,
    halves_f32x8,
    hsum_f32x8,
    load_f32x8,
    load_i8x32,
    mul_f32x8,
    sign_i8x32,
    splat_f32x8,
    zeros_f32x8,
)


@njit(cache=True, nogil=True, inline="always")
def _dot_signed(q, sc, xq, xd, xo, do, nb):
    acc0 = zeros_f32x8()
    acc1 = zeros_f32x8()
    for b in range(0, nb - 1, 2):  # two accumulators: the fma latency chain limits T=1
        d0 = xd[do + b]
        d1 = xd[do + b + 1]
        p0 = dot_i8x32(load_i8x32(q, b * 32), load_i8x32(xq, xo + b * 32))
        p1 = dot_i8x32(load_i8x32(q, b * 32 + 32), load_i8x32(xq, xo + b * 32 + 32))
        acc0 = fma_i32x8(acc0, p0, halves_f32x8(sc[2 * b] * d0, sc[2 * b + 1] * d0))
        acc1 = fma_i32x8(acc1, p1, halves_f32x8(sc[2 * b + 2] * d1, sc[2 * b + 3] * d1))
    if nb % 2:
        b = nb - 1
        d0 = xd[do + b]
        p0 = dot_i8x32(load_i8x32(q, b * 32), load_i8x32(xq, xo + b * 32))
        acc0 = fma_i32x8(acc0, p0, halves_f32x8(sc[2 * b] * d0, sc[2 * b + 1] * d0))
    return hsum_f32x8(acc0) + hsum_f32x8(acc1)


@njit(cache=True, nogil=True, inline="always")
def _dot_unsigned(q, sc, xq, xd, xo, do, nb):
    acc0 = zeros_f32x8()
    acc1 = zeros_f32x8()
    for b in range(0, nb - 1, 2):
        d0 = xd[do + b]
        d1 = xd[do + b + 1]
        p0 = dotu_i8x32(load_i8x32(q, b * 32), load_i8x32(xq, xo + b * 32))
        p1 = dotu_i8x32(load_i8x32(q, b * 32 + 32), load_i8x32(xq, xo + b * 32 + 32))
        acc0 = fma_i32x8(acc0, p0, halves_f32x8(sc[2 * b] * d0, sc[2 * b + 1] * d0))
        acc1 = fma_i32x8(acc1, p1, halves_f32x8(sc[2 * b + 2] * d1, sc[2 * b + 3] * d1))
    if nb % 2:
        b = nb - 1
        d0 = xd[do + b]
        p0 = dotu_i8x32(load_i8x32(q, b * 32), load_i8x32(xq, xo + b * 32))
        acc0 = fma_i32x8(acc0, p0, halves_f32x8(sc[2 * b] * d0, sc[2 * b + 1] * d0))
    return hsum_f32x8(acc0) + hsum_f32x8(acc1)


@njit(cache=True, nogil=True, inline="always")
def _dot4(q, sc, xq, xd, i, nb, signed):
    """Four activation rows i..i+3 against one unpacked weight row: each weight block
    (and |q| for signed types) and its scales are loaded once for the four rows."""
    acc0 = zeros_f32x8()
    acc1 = zeros_f32x8()
    acc2 = zeros_f32x8()
    acc3 = zeros_f32x8()
    c = nb * 32
    for b in range(nb):
        w = load_i8x32(q, b * 32)
        u = abs_i8x32(w) if signed else w
        sv = halves_f32x8(sc[2 * b], sc[2 * b + 1])
        a0 = load_i8x32(xq, i * c + b * 32)
        a1 = load_i8x32(xq, (i + 1) * c + b * 32)
        a2 = load_i8x32(xq, (i + 2) * c + b * 32)
        a3 = load_i8x32(xq, (i + 3) * c + b * 32)
        if signed:
            a0 = sign_i8x32(a0, w)
            a1 = sign_i8x32(a1, w)
            a2 = sign_i8x32(a2, w)
            a3 = sign_i8x32(a3, w)
        acc0 = fma_i32x8(acc0, dotu_i8x32(u, a0), mul_f32x8(sv, splat_f32x8(xd[i * nb + b])))
        acc1 = fma_i32x8(acc1, dotu_i8x32(u, a1), mul_f32x8(sv, splat_f32x8(xd[(i + 1) * nb + b])))
        acc2 = fma_i32x8(acc2, dotu_i8x32(u, a2), mul_f32x8(sv, splat_f32x8(xd[(i + 2) * nb + b])))
        acc3 = fma_i32x8(acc3, dotu_i8x32(u, a3), mul_f32x8(sv, splat_f32x8(xd[(i + 3) * nb + b])))
    return hsum_f32x8(acc0), hsum_f32x8(acc1), hsum_f32x8(acc2), hsum_f32x8(acc3)


@njit(cache=True, nogil=True, inline="always")
def dot_row(q, sc, mn, xq, xd, xs, i, signed):
    """Unpacked weight row (q, sc, mn) . activation row i, in float32.

    = sum_k (sc[k//16] * q[k] - mn[k//16]) * xd[i, k//32] * xq[i, k].
    q (C,) int8 (unsigned 0..63 unless signed), sc, mn (C/16,) f32; xq (T*C,)
    int8, xd (T*C/32,), xs (T*C/16,) f32 flat (quant.quantize_act); C % 32 == 0.
    """
    nb = q.shape[0] // 32
    if signed:
        return _dot_signed(q, sc, xq, xd, i * nb * 32, i * nb, nb)
    return _dot_unsigned(q, sc, xq, xd, i * nb * 32, i * nb, nb) - _min_term(mn, xs, i)


@njit(cache=True, nogil=True, inline="always")
def _min_term(mn, xs, i):
    """sum_g mn[g] * xs[i, g] with xs flat (T*C/16,)."""
    ng = mn.shape[0]
    o = i * ng
    ng8 = ng - ng % 8
    acc = zeros_f32x8()
    for g in range(0, ng8, 8):
        acc = fma_f32x8(acc, load_f32x8(mn, g), load_f32x8(xs, o + g))
    s = hsum_f32x8(acc)
    for g in range(ng8, ng):
        s += mn[g] * xs[o + g]
    return s


def qmatmul(
    out: np.ndarray,
    xq: np.ndarray,
    xd: np.ndarray,
    xs: np.ndarray,
    w: np.ndarray,
    kind: int,
    rscale: np.ndarray,
    signed: bool,
) -> None:
    """out (T, N) f32 = dequant(w) @ x.T in int8-activation form (arguments as qmatmul_rows).

    The kernel is plan.int8_path (linear.matmul asks plan.plan_matmul, the same table): Q4_0, Q8_0,
    Q4_K and Q6_K run the register-tiled kernel (gemm_tile), Q4_0, Q8_0 and Q4_K from plan.AMX_MIN_T
    tokens on the AMX tiles where the CPU has them; the other types unpack each row once to L1 (qmatmul_rows).
    """
    path = plan.int8_path(kind, xq.shape[0])
    if path is plan.Path.AMX:
        gemm_tile_amx.qmatmul_amx(out, xq, xd, xs, w, kind)
    elif path is plan.Path.TILE:
        gemm_tile.qmatmul_tile(out, xq, xd, xs, w, kind)
    else:
        qmatmul_rows(out, xq, xd, xs, w, kind, rscale, signed)


@njit(cache=True, nogil=True, parallel=True)
def qmatmul_rows(out, xq, xd, xs, w, kind, rscale, signed):
    """out (T, N) f32 = dequant(w) @ x.T in int8-activation form, any quant.KIND.

    parallel=True: rows of W are independent and decode is bandwidth/compute
    bound on every core; the caller sets numba.set_num_threads.
    out (T, N) f32 C-contig, written fully; xq (T, C) int8, xd (T, C/32) f32,
    xs (T, C/16) f32 from quant.quantize_act; w (N, row_bytes) uint8 C-contig;
    kind: quant.KIND code; rscale (N,) f32 for I8/I4 else (1,); signed: the type
    is in quant.SIGNED. No aliasing between out and inputs.
    """
    t, c = xq.shape
    n, nbytes = w.shape
    wf = w.reshape(-1)
    xqf = xq.reshape(-1)
    xdf = xd.reshape(-1)
    xsf = xs.reshape(-1)
    nchunk = max(1, min(n, n // 16))
    for ch in prange(nchunk):
        q = np.empty(c, np.int8)
        sc = np.empty(c // 16, np.float32)
        mn = np.empty(c // 16, np.float32)
        for r in range(ch * n // nchunk, (ch + 1) * n // nchunk):
            rs = rscale[r] if rscale.shape[0] > 1 else rscale[0]
            unpack_row(kind, q, sc, mn, wf, r * nbytes, rs)
            i = 0
            while i + 4 <= t:
                v0, v1, v2, v3 = _dot4(q, sc, xqf, xdf, i, c // 32, signed)
                if not signed:
                    v0 -= _min_term(mn, xsf, i)
                    v1 -= _min_term(mn, xsf, i + 1)
                    v2 -= _min_term(mn, xsf, i + 2)
                    v3 -= _min_term(mn, xsf, i + 3)
                out[i, r] = v0
                out[i + 1, r] = v1
                out[i + 2, r] = v2
                out[i + 3, r] = v3
                i += 4
            while i < t:
                out[i, r] = dot_row(q, sc, mn, xqf, xdf, xsf, i, signed)
                i += 1
