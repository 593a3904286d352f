"""F16 / BF16 weights: matmul for small T and row conversion to float32 for the BLAS path.

fp16 is converted in registers (vcvtph2ps via qdot.load_f16x8), bf16 by a shift;
the weights stay in their stored layout (mmap'd bytes, any alignment). numpy twin: ref_linear.matmul.
T=1 is bound by memory latency: its row dot prefetches PREFETCH_BYTES ahead in the
weight stream and, on AVX-512 (cpu.HAS_AVX512), converts 16 halves per instruction
into four independent 16-lane accumulators.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from modelc.kernels.runtime.cpu import HAS_AVX512
from modelc.kernels.simd.qdot import (
    add_f32x16,
    bf16_at,
    f16_at,
    fma_f32x8,
    fma_f32x16,
    hsum_f32x8,
    hsum_f32x16,
    load_bf16x8,
    load_bf16x16,
    load_f16x8,
    load_f16x16,
    load_f32x8,
    load_f32x16,
    prefetch,
    store_f32x8,
    zeros_f32x8,
    zeros_f32x16,
)

PREFETCH_BYTES = 4096
"""How far ahead in the weight bytes the T=1 row dot prefetches. Measured on the dev VM
(TinyLlama F16, all matrices, 2 threads): none 0.67x, 2048: 0.97x, 4096: 1x, 8192: 0.99-1.01x."""


@njit(cache=True, nogil=True, inline="always")
def convert_row(buf, bo, w, base, c, bf16):
    """buf[bo:bo+c] = float32 of the c fp16 (bf16 if bf16) values at bytes w[base:base+2c]."""
    c8 = c - c % 8
    for k in range(0, c8, 8):
        v = load_bf16x8(w, base + 2 * k) if bf16 else load_f16x8(w, base + 2 * k)
        store_f32x8(buf, bo + k, v)
    for k in range(c8, c):
        buf[bo + k] = bf16_at(w, base + 2 * k) if bf16 else f16_at(w, base + 2 * k)


@njit(cache=True, nogil=True, inline="always")
def _dot_f32(buf, bo, x, xo, c):
    """sum_k buf[bo + k] * x[xo + k], buf and x flat float32."""
    acc0 = zeros_f32x8()
    acc1 = zeros_f32x8()
    c16 = c - c % 16
    for k in range(0, c16, 16):
        acc0 = fma_f32x8(acc0, load_f32x8(buf, bo + k), load_f32x8(x, xo + k))
        acc1 = fma_f32x8(acc1, load_f32x8(buf, bo + k + 8), load_f32x8(x, xo + k + 8))
    s = hsum_f32x8(acc0) + hsum_f32x8(acc1)
    for k in range(c16, c):
        s += buf[bo + k] * x[xo + k]
    return s


@njit(cache=True, nogil=True, inline="always")
def _dot4_f32(buf, bo, x, i, c):
    """Rows i..i+3 of x (flat, row length c) . buf[bo:bo+c]: each buf vector loaded once for 4 rows."""
    acc0 = zeros_f32x8()
    acc1 = zeros_f32x8()
    acc2 = zeros_f32x8()
    acc3 = zeros_f32x8()
    c8 = c - c % 8
    for k in range(0, c8, 8):
        v = load_f32x8(buf, bo + k)
        acc0 = fma_f32x8(acc0, v, load_f32x8(x, i * c + k))
        acc1 = fma_f32x8(acc1, v, load_f32x8(x, (i + 1) * c + k))
        acc2 = fma_f32x8(acc2, v, load_f32x8(x, (i + 2) * c + k))
        acc3 = fma_f32x8(acc3, v, load_f32x8(x, (i + 3) * c + k))
    s0 = hsum_f32x8(acc0)
    s1 = hsum_f32x8(acc1)
    s2 = hsum_f32x8(acc2)
    s3 = hsum_f32x8(acc3)
    for k in range(c8, c):
        s0 += buf[bo + k] * x[i * c + k]
        s1 += buf[bo + k] * x[(i + 1) * c + k]
        s2 += buf[bo + k] * x[(i + 2) * c + k]
        s3 += buf[bo + k] * x[(i + 3) * c + k]
    return s0, s1, s2, s3


@njit(cache=True, nogil=True, inline="always")
def _dot_half(w, base, x, c, bf16):
    """sum_k half(w at base)[k] * x[k] for T=1: convert in registers, no buffer."""
    if HAS_AVX512:
        return _dot_half16(w, base, x, c, bf16)
    acc0 = zeros_f32x8()
    acc1 = zeros_f32x8()
    c16 = c - c % 16
    for k in range(0, c16, 16):
        prefetch(w, base + 2 * k + PREFETCH_BYTES)
        if bf16:
            w0 = load_bf16x8(w, base + 2 * k)
            w1 = load_bf16x8(w, base + 2 * k + 16)
        else:
            w0 = load_f16x8(w, base + 2 * k)
            w1 = load_f16x8(w, base + 2 * k + 16)
        acc0 = fma_f32x8(acc0, w0, load_f32x8(x, k))
        acc1 = fma_f32x8(acc1, w1, load_f32x8(x, k + 8))
    s = hsum_f32x8(acc0) + hsum_f32x8(acc1)
    for k in range(c16, c):
        s += (bf16_at(w, base + 2 * k) if bf16 else f16_at(w, base + 2 * k)) * x[k]
    return s


@njit(cache=True, nogil=True, inline="always")
def _dot_half16(w, base, x, c, bf16):
    """_dot_half with 16-lane vectors: 64 halves (two cache lines) per step, four accumulators."""
    acc0 = zeros_f32x16()
    acc1 = zeros_f32x16()
    acc2 = zeros_f32x16()
    acc3 = zeros_f32x16()
    c64 = c - c % 64
    for k in range(0, c64, 64):
        o = base + 2 * k
        prefetch(w, o + PREFETCH_BYTES)
        prefetch(w, o + PREFETCH_BYTES + 64)
        if bf16:
            acc0 = fma_f32x16(acc0, load_bf16x16(w, o), load_f32x16(x, k))
            acc1 = fma_f32x16(acc1, load_bf16x16(w, o + 32), load_f32x16(x, k + 16))
            acc2 = fma_f32x16(acc2, load_bf16x16(w, o + 64), load_f32x16(x, k + 32))
            acc3 = fma_f32x16(acc3, load_bf16x16(w, o + 96), load_f32x16(x, k + 48))
        else:
            acc0 = fma_f32x16(acc0, load_f16x16(w, o), load_f32x16(x, k))
            acc1 = fma_f32x16(acc1, load_f16x16(w, o + 32), load_f32x16(x, k + 16))
            acc2 = fma_f32x16(acc2, load_f16x16(w, o + 64), load_f32x16(x, k + 32))
            acc3 = fma_f32x16(acc3, load_f16x16(w, o + 96), load_f32x16(x, k + 48))
    c16 = c - c % 16
    for k in range(c64, c16, 16):
        w0 = load_bf16x16(w, base + 2 * k) if bf16 else load_f16x16(w, base + 2 * k)
        acc0 = fma_f32x16(acc0, w0, load_f32x16(x, k))
    s = hsum_f32x16(add_f32x16(add_f32x16(acc0, acc1), add_f32x16(acc2, acc3)))
    for k in range(c16, c):
        s += (bf16_at(w, base + 2 * k) if bf16 else f16_at(w, base + 2 * k)) * x[k]
    return s


@njit(cache=True, nogil=True, inline="always")
def _rows_dot(out, r, buf, bo, x, t, c):
    """out[:, r] = x (T rows, flat) . buf[bo:bo+c], four rows at a time."""
    i = 0
    while i + 4 <= t:
        v0, v1, v2, v3 = _dot4_f32(buf, bo, x, i, c)
        out[i, r] = v0
        out[i + 1, r] = v1
        out[i + 2, r] = v2
        out[i + 3, r] = v3
        i += 4
    while i < t:
        out[i, r] = _dot_f32(buf, bo, x, i * c, c)
        i += 1


@njit(cache=True, nogil=True, parallel=True)
def smatmul(out, x, w):
    """out (T, N) f32 = x (T, C) f32 @ W.T for a float32 W (N, C), small T.

    OpenBLAS was slow for 2 <= T < 32 here (47 ms vs 9 ms at T=1 for 5632 x 2048
    on the busy VM); this streams each row once for all T rows. parallel=True:
    output rows are independent. out, x, w C-contig; no aliasing.
    """
    t, c = x.shape
    n = w.shape[0]
    wf = w.reshape(-1)
    xf = x.reshape(-1)
    nchunk = max(1, min(n, n // 16))
    for ch in prange(nchunk):
        for r in range(ch * n // nchunk, (ch + 1) * n // nchunk):
            _rows_dot(out, r, wf, r * c, xf, t, c)


@njit(cache=True, nogil=True, parallel=True)
def hmatmul(out, x, w, bf16):
    """out (T, N) f32 = x (T, C) f32 @ W.T for W (N, 2C bytes) uint8 holding fp16 (or bf16) rows.

    parallel=True: output rows are independent; the caller sets the thread count.
    T == 1 converts in registers; T > 1 converts each row once into an L1
    buffer and reuses it for all T rows. out, x C-contig; no aliasing.
    """
    t, c = x.shape
    n, nbytes = w.shape
    wf = w.reshape(-1)
    xf = x.reshape(-1)
    nchunk = max(1, min(n, n // 16))
    for ch in prange(nchunk):
        buf = np.empty(c, np.float32)
        for r in range(ch * n // nchunk, (ch + 1) * n // nchunk):
            if t == 1:
                out[0, r] = _dot_half(wf, r * nbytes, xf, c, bf16)
            else:
                convert_row(buf, 0, wf, r * nbytes, c, bf16)
                _rows_dot(out, r, buf, 0, xf, t, c)


@njit(cache=True, nogil=True, parallel=True)
def convert_rows(out, w, row_ids, bf16):
    """out (R, C) f32 = fp16 (or bf16) rows w[row_ids] of (N, 2C bytes) uint8. parallel: rows independent."""
    r, c = out.shape
    nbytes = w.shape[1]
    wf = w.reshape(-1)
    of = out.reshape(-1)
    for i in prange(r):
        convert_row(of, i * c, wf, row_ids[i] * nbytes, c, bf16)
