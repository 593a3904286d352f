"""matmul without numba: dequantize W panel by panel in numpy, then one BLAS call per panel.

The compile-free path of a cold start (kernels/hybrid.py) runs this while numba compiles: the same
fp32 values as ref_linear.matmul (the dequantized weights are exact; only BLAS's summation order
differs), several times faster on a quantized 1B model. Q4_0 and Q8_0 (the common small-model types)
dequantize by table lookup; every other type through ref_linear's dequantizer. The product is
computed as W_panel @ x.T: with OpenBLAS, a few activation rows times a transposed weight
(x @ W.T) ran ~5x slower here.
"""

from __future__ import annotations

import functools

import numpy as np

from modelc.ir import DataType
from modelc.kernels.matmul.gemm_weight import Weight, check_matmul_args
from modelc.kernels.reference.ref_linear import dequantize_weight_rows
from modelc.kernels.runtime.threads import get_blas_threads, set_blas_threads

PANEL_BYTES = 512 << 10
"""f32 bytes of one dequantized panel: it stays in L2 between dequantizing and BLAS (4 MiB ran ~3x slower)."""

_NIB = np.arange(256, dtype=np.int32)
_PAIRS = np.stack([(_NIB & 15) - 8, (_NIB >> 4) - 8], axis=1).astype(np.float32).view(np.uint64).ravel()
"""(256,) Q4_0 byte j of a block -> its two values (element j, element 16 + j) as one 8-byte word."""


@functools.lru_cache(maxsize=8)
def _q4_0_order(cols: int) -> np.ndarray:
    """(C,) the column order _q4_0 writes: per 32-block elements 0, 16, 1, 17, ..., 15, 31."""
    j = np.arange(16)
    block = np.stack([j, j + 16], axis=1).ravel()  # (32,)
    return (np.arange(0, cols, 32)[:, None] + block[None, :]).ravel()


def _q4_0(rb: np.ndarray, out: np.ndarray) -> None:
    """(R, row_bytes) Q4_0 rows -> out (R, C) f32 in _q4_0_order's column order: per 18-byte block an
    fp16 scale and 16 bytes of two nibbles, looked up as value pairs (one 8-byte gather per byte is
    ~2x faster than two 4-byte gathers into halves of each block)."""
    b = rb.reshape(-1, 18)  # (NB, 18)
    o = out.reshape(-1, 32)  # (NB, 32)
    np.take(_PAIRS, b[:, 2:18], out=o.view(np.uint64))  # (NB, 16) pairs
    o *= np.ascontiguousarray(b[:, 0:2]).view("<f2").astype(np.float32)  # (NB, 1)


def _q8_0(rb: np.ndarray, out: np.ndarray) -> None:
    """(R, row_bytes) Q8_0 rows -> out (R, C) f32: per 34-byte block an fp16 scale and 32 int8."""
    b = rb.reshape(-1, 34)
    o = out.reshape(-1, 32)
    o[...] = np.ascontiguousarray(b[:, 2:34]).view(np.int8)
    o *= np.ascontiguousarray(b[:, 0:2]).view("<f2").astype(np.float32)


def _panel(w: Weight, r0: int, r1: int, out: np.ndarray) -> np.ndarray:
    """Rows r0:r1 of W as f32 (r1 - r0, C), written into `out` when it has to be converted (Q4_0: its
    columns in _q4_0_order, which matmul applies to x too)."""
    rb = w.blocks[r0:r1]
    if w.dtype is DataType.F32:
        return rb.view("<f4")
    if w.dtype is DataType.F16:
        out[...] = rb.view("<f2")
    elif w.dtype is DataType.Q4_0:
        _q4_0(rb, out)
    elif w.dtype is DataType.Q8_0:
        _q8_0(rb, out)
    else:
        out[...] = dequantize_weight_rows(w, np.arange(r0, r1, dtype=np.int64))
    return out


def matmul(out: np.ndarray, x: np.ndarray, w: Weight) -> None:
    """out (T, N) f32 = x (T, C) f32 @ W.T, W as stored; same contract as linear.matmul."""
    check_matmul_args(out, x, w)
    if x.shape[0] == 0 or w.rows == 0:
        return
    step = max(1, PANEL_BYTES // (4 * w.cols))
    buf = np.empty((min(step, w.rows), w.cols), np.float32)  # (P, C)
    xt = np.ascontiguousarray((x[:, _q4_0_order(w.cols)] if w.dtype is DataType.Q4_0 else x).T)  # (C, T)
    # NOTE: one BLAS thread for these small products: a second one is handed each of the thousands of
    # panels, and on a busy machine every hand-off waits for it to be scheduled (a 4 CPU-s forward of a
    # 1B Q4_0 took 170 s at load 12 with two)
    before = get_blas_threads()
    set_blas_threads(1)
    try:
        for r0 in range(0, w.rows, step):
            r1 = min(r0 + step, w.rows)
            out[:, r0:r1] = (_panel(w, r0, r1, buf[: r1 - r0]) @ xt).T
    finally:
        if before is not None:
            set_blas_threads(before)
