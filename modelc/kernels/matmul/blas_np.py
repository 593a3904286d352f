"""matmul without numba: dequantize W panel by panel in numpy, then one BLAS call per panel.

The compile-free path of a cold start (kernels/hybrid.py) runs this while numba compiles: the same
fp32 values as ref_linear.matmul (the dequantized weights are exact; only BLAS's summation order
differs), several times faster on a quantized 1B model. Q4_0, Q4_1 and Q8_0 (the common small-model
types) dequantize by table lookup; every other type through ref_linear's dequantizer. The product is
computed as W_panel @ x.T: with OpenBLAS, a few activation rows times a transposed weight
(x @ W.T) ran ~5x slower here.

`Dequantized(budget_bytes).matmul` keeps the f32 matrix of each weight it meets, made once, until the copies
take `budget_bytes`; weights met after that dequantize per call (matmul). A decode step then reads f32 rows
through sgemv instead of dequantizing every matrix again: SmolLM2-135M Q4_1 (its matrices 0.54 GB in f32)
decoded at 0.4 tok/s dequantizing per call, mostly ref_linear's Q4_1 (load ~8 on 2 cores).
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


_UPAIRS = np.stack([_NIB & 15, _NIB >> 4], axis=1).astype(np.float32).view(np.uint64).ravel()
"""(256,) Q4_1 byte j of a block -> its two unsigned values (element j, element 16 + j) as one 8-byte word."""


def _q4_1(rb: np.ndarray, out: np.ndarray) -> None:
    """(R, row_bytes) Q4_1 rows -> out (R, C) f32 in _q4_0_order's column order: per 20-byte block an fp16
    scale d, an fp16 min m and 16 bytes of two nibbles q (value d * q + m)."""
    b = rb.reshape(-1, 20)  # (NB, 20)
    o = out.reshape(-1, 32)  # (NB, 32)
    np.take(_UPAIRS, b[:, 4:20], out=o.view(np.uint64))  # (NB, 16) pairs
    o *= np.ascontiguousarray(b[:, 0:2]).view("<f2").astype(np.float32)  # (NB, 1)
    o += np.ascontiguousarray(b[:, 2:4]).view("<f2").astype(np.float32)


def _q8_0(rb: np.ndarray, out: np.ndarray) -> None:
    """(R, row_bytes) Q8_0 rows -> out (R, C) f32: per 34-byte block an fp16 scale and 32 int8."""
    b = rb.reshape(-1, 34)
    o = out.reshape(-1, 32)
    o[...] = np.ascontiguousarray(b[:, 2:34]).view(np.int8)
    o *= np.ascontiguousarray(b[:, 0:2]).view("<f2").astype(np.float32)


def _panel(w: Weight, r0: int, r1: int, out: np.ndarray) -> np.ndarray:
    """Rows r0:r1 of W as f32 (r1 - r0, C), written into `out` when it has to be converted (Q4_0, Q4_1: its
    columns in _q4_0_order, which matmul applies to x too)."""
    rb = w.blocks[r0:r1]
    if w.dtype is DataType.F32:
        return rb.view("<f4")
    if w.dtype is DataType.F16:
        out[...] = rb.view("<f2")
    elif w.dtype is DataType.Q4_0:
        _q4_0(rb, out)
    elif w.dtype is DataType.Q4_1:
        _q4_1(rb, out)
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
    xt = np.ascontiguousarray(_ordered(x, w).T)  # (C, T)
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


def _ordered(x: np.ndarray, w: Weight) -> np.ndarray:
    """x's columns in the order _panel writes w's (T, C)."""
    return x[:, _q4_0_order(w.cols)] if w.dtype in _PAIRED else x


_PAIRED = (DataType.Q4_0, DataType.Q4_1)  # types _panel writes in _q4_0_order


class Dequantized:
    """matmul on f32 copies of the weights, each made once, while they take at most `budget_bytes` in all
    (the first weights met: a forward meets them in the same order every time, so any others would only
    evict each other); a weight past the budget runs matmul (dequantized per call). Not thread-safe."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self.used_bytes = 0
        self._copies: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # id(w.blocks) -> (w.blocks, (N, C) f32)
        self._kept_out: dict[int, np.ndarray] = {}  # id(w.blocks) -> w.blocks: never copied

    def keep_out(self, w: Weight) -> None:
        """Never copy `w` (it dequantizes per call): the vocabulary matrices, whose f32 copy would cost 4 bytes a
        weight of the largest matrix of a small model (Gemma 3's 262k-row head: 671 MB at 640 columns)."""
        self._kept_out[id(w.blocks)] = w.blocks

    def matmul(self, out: np.ndarray, x: np.ndarray, w: Weight) -> None:
        """out (T, N) f32 = x (T, C) f32 @ W.T; the contract of linear.matmul."""
        check_matmul_args(out, x, w)
        if x.shape[0] == 0 or w.rows == 0:
            return
        f = self._copy(w)
        if f is None:
            matmul(out, x, w)
            return
        xo = _ordered(x, w)
        before = get_blas_threads()
        set_blas_threads(1)  # as matmul: small products, no hand-off to a second thread
        try:
            if x.shape[0] == 1:
                np.matmul(f, xo[0], out=out[0])  # sgemv over the f32 rows
            else:
                out[...] = (f @ np.ascontiguousarray(xo.T)).T
        finally:
            if before is not None:
                set_blas_threads(before)

    def _copy(self, w: Weight) -> np.ndarray | None:
        got = self._copies.get(id(w.blocks))
        if got is not None and got[0] is w.blocks:
            return got[1]
        size = 4 * w.rows * w.cols
        if self._kept_out.get(id(w.blocks)) is w.blocks:
            return None
        if w.dtype is DataType.F32 or self.used_bytes + size > self.budget_bytes:
            return None  # F32: matmul reads the stored rows as they are
        f = np.empty((w.rows, w.cols), np.float32)  # (N, C)
        step = max(1, PANEL_BYTES // (4 * w.cols))
        for r0 in range(0, w.rows, step):
            r1 = min(r0 + step, w.rows)
            view = f[r0:r1]
            got = _panel(w, r0, r1, view)
            if got is not view:  # F16 is written into view; only F32 (never copied) returns the stored rows
                view[...] = got
        self._copies[id(w.blocks)] = (w.blocks, f)
        self.used_bytes += size
        return f
