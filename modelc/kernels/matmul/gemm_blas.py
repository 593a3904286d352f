"""The prefill path: dequantize a weight into a reused per-thread float32 panel, then BLAS.

For many tokens (T >= plan.PREFILL_MIN_T) OpenBLAS sgemm on a float32 copy of
one matrix beats the int8 kernels; the copy lives in a per-thread scratch
buffer (never kept per weight), in row panels of at most PANEL_BYTES.
"""

from __future__ import annotations

import ctypes
import glob
import os
import threading

import numba
import numpy as np

from modelc.ir import DataType
from modelc.kernels.matmul import gemm_float
from modelc.kernels.matmul.gemm_weight import Weight
from modelc.kernels.quant import quant
from modelc.kernels.reference import ref_linear
from modelc.kernels.runtime.threads import blas_threads_for

PANEL_BYTES = 64 << 20
"""Largest float32 panel dequantized at once (a 32000 x 2048 lm_head goes in 2 panels)."""

SPIN_MIN_MACS = 1 << 26
"""Where OpenBLAS's idle workers spin ~0.1 s after a call (numpy imported before modelc), sgemm of fewer
multiply-adds than this runs on one thread: a MoE router (32 x 1024 at 128 tokens) between expert kernels
(Qwen3-MoE-shaped prefill of 128 tokens: 151 -> ~500 tok/s), where a 2048 x 2048 projection keeps numba's count."""

_local = threading.local()
_ONE = np.ones(1, np.float32)


def _find_blas_threads_setter():
    """OpenBLAS's per-calling-thread `openblas_set_num_threads_local`, if numpy bundles OpenBLAS."""
    libdir = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    for path in sorted(glob.glob(os.path.join(libdir, "lib*openblas*.so*"))):
        try:
            fn = ctypes.CDLL(path).openblas_set_num_threads_local
        except (OSError, AttributeError):
            continue
        fn.argtypes = [ctypes.c_int]
        fn.restype = ctypes.c_int
        return fn
    return None


_blas_threads_local = _find_blas_threads_setter()


def _matmul(x: np.ndarray, wt: np.ndarray, out: np.ndarray) -> None:
    """np.matmul with OpenBLAS limited to the caller's numba thread count.

    engines x threads <= cores holds for BLAS too: an engine set to 1 thread must
    not fan its prefill out over every core (OpenBLAS defaults to all of them).
    """
    if _blas_threads_local is None:
        np.matmul(x, wt, out=out)
        return
    n = numba.get_num_threads()
    if out.size * x.shape[-1] < SPIN_MIN_MACS:
        n = blas_threads_for(n)  # 1 where OpenBLAS's workers would spin ~0.1 s after it: worth it for big ones only
    old = _blas_threads_local(n)
    try:
        np.matmul(x, wt, out=out)
    finally:
        _blas_threads_local(old)


def scratch(num_floats: int) -> np.ndarray:
    """This thread's reusable float32 buffer of at least num_floats (grown, never shrunk)."""
    buf = getattr(_local, "buf", None)
    if buf is None or buf.shape[0] < num_floats:
        buf = np.empty(num_floats, np.float32)
        _local.buf = buf
    return buf[:num_floats]


def dequantize_into(out: np.ndarray, w: Weight, row_ids: np.ndarray) -> None:
    """out (R, C) f32 = dequantized rows row_ids of w (numba kernels)."""
    ids = np.ascontiguousarray(row_ids, dtype=np.int64)
    if w.dtype is DataType.F32:
        out[...] = w.blocks.view("<f4")[ids]
    elif w.dtype in (DataType.F16, DataType.BF16):
        gemm_float.convert_rows(out, w.blocks, ids, w.dtype is DataType.BF16)
    elif w.cols % 32:  # I8/I4 rows that are not whole 32-blocks: numpy
        out[...] = ref_linear.dequantize_weight_rows(w, ids)
    else:
        rscale = _ONE if w.scale is None else np.ascontiguousarray(w.scale, dtype=np.float32)
        if ids.shape[0] < 64:  # an embedding lookup: one thread, no pool wake-up
            kind = quant.KIND[w.dtype]
            quant.rows_1t(out, w.blocks, ids, kind, rscale, quant.family(kind))
        else:
            quant.dequantize_rows_q(out, w.blocks, ids, quant.KIND[w.dtype], rscale)


def blas_matmul(out: np.ndarray, x: np.ndarray, w: Weight) -> None:
    """out (T, N) = x (T, C) @ W.T via float32 panels of W and np.matmul (BLAS)."""
    n, c = w.rows, w.cols
    if w.dtype is DataType.F32:
        _matmul(x, w.blocks.view("<f4").T, out)
        return
    rows = max(1, min(n, PANEL_BYTES // (4 * max(c, 1))))
    buf = scratch(rows * c)
    for n0 in range(0, n, rows):
        n1 = min(n, n0 + rows)
        panel = buf[: (n1 - n0) * c].reshape(n1 - n0, c)  # (rows, C)
        dequantize_into(panel, w, np.arange(n0, n1, dtype=np.int64))
        if n0 == 0 and n1 == n:
            _matmul(x, panel.T, out)
        else:
            part = np.empty((x.shape[0], n1 - n0), np.float32)  # (T, rows)
            _matmul(x, panel.T, part)
            out[:, n0:n1] = part
