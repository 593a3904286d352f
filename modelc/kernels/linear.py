"""Public matmul API: prepare a stored weight once, then out = x @ W.T on its stored dtype.

Dispatches by T: few tokens (decode, small batches) run the int8-activation
kernels (gemm_int) or the fp16/bf16 kernels (gemm_float); T >= PREFILL_MIN_T
dequantizes W panel by panel into per-thread scratch and calls BLAS (gemm_blas).
MODELC_KERNELS=ref runs the numpy twins (ref_linear). No fp32 copy of a whole
weight is ever kept. Threads: numba.set_num_threads, set by the caller.
"""

from __future__ import annotations

import os

# NOTE: libgomp (numba's default `omp` threading layer) reads this when it loads, at
# the first parallel kernel. Its default spin-waiting at barriers burns the cycles a
# descheduled peer thread needs: with 2 threads on a busy 2-vCPU box a T=1 matmul
# was 10x slower than passive waiting (measured: 0.5 vs 5.3 tok/s matmul-only on
# a TinyLlama Q4_0). An explicit setting from the user wins.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numba  # noqa: E402
import numpy as np  # noqa: E402

from modelc.ir import DataType, TensorData
from modelc.kernels import (
    gemm_blas,
    gemm_float,
    gemm_fused,
    gemm_fused_iq,
    gemm_fused_k,
    gemm_int,
    gemm_tile,
    gemm_tile_amx,
    qdot_tile,
    quant,
    ref_linear,
)
from modelc.kernels.gemm_weight import Weight, check_matmul_args, check_row_ids, make_weight, rows_cols

__all__ = [
    "Weight",
    "prepare_weight",
    "matmul",
    "dequantize",
    "dequantize_rows",
    "use_reference",
    "PREFILL_MIN_T",
    "PREFILL_MIN_T_FLOAT",
]

PREFILL_MIN_T = int(os.environ.get("MODELC_PREFILL_T", "32"))
"""From this many tokens on, matmul dequantizes into scratch and uses BLAS (fp32
results), except for the kinds the AMX int8 tiles serve (gemm_tile_amx.PREFILL_MAX_T:
Q4_0, Q8_0, Q4_K where qdot_tile.HAS_AMX), which stay on the int8-activation path.

Measured on the dev VM (2 threads, 5632 x 2048 Q4_0): int8 zmm path 17 / 67 / 310 ms
at T = 32 / 128 / 512, dequantize + OpenBLAS 72 / 72 / 149 ms (dequantizing
costs ~9 ms, small-M sgemm is slow), so the crossover is near T = 150 there; the
AMX tiles beat BLAS at every prefill T up to 512 (x3.2-3.7 per layer at 32, x1.5-2.1
at 512: gemm_tile_amx.PREFILL_MAX_T). Below this T every quantized weight runs int8."""

PREFILL_MIN_T_FLOAT = int(os.environ.get("MODELC_PREFILL_T_FLOAT", "32"))
"""The same for F16/BF16/F32 weights: their small-T kernels are FMA-bound (~20-35
GFLOP/s), below BLAS (~40) already at T = 128 on the dev VM."""

CHUNK = int(os.environ.get("MODELC_PARALLEL_CHUNK", "4"))
"""prange iterations (of 16 output rows each) a thread takes at a time: dynamic
scheduling, so on a busy machine a descheduled thread delays a call by one
chunk, not by half the matrix (matmul-only TinyLlama Q4_0 decode, 2 threads,
busy VM: 6.2 / 7.8 tok/s vs 3.4 / 5.7 static). 0 = numba's static split."""

_ONE = np.ones(1, np.float32)
_FLOAT = (DataType.F16, DataType.BF16, DataType.F32)


def use_reference() -> bool:
    """True when MODELC_KERNELS=ref asks for the numpy reference kernels."""
    return os.environ.get("MODELC_KERNELS", "").lower() == "ref"


def prepare_weight(t: TensorData, scale: TensorData | None = None) -> Weight:
    """Wrap a stored (N, C) weight (and its per-row F32 scale for I8/I4) for matmul (zero-copy)."""
    return make_weight(t, scale)


def _int_path_ok(w: Weight) -> bool:
    return w.dtype in quant.KIND and w.cols % 32 == 0


def matmul(out: np.ndarray, x: np.ndarray, w: Weight) -> None:
    """out (T, N) f32 = x (T, C) f32 C-contiguous @ W.T, W (N, C) as stored in `w`.

    Quantized W: x is quantized to int8 blocks (error ~5e-3 relative, as in
    llama.cpp) below PREFILL_MIN_T tokens; at or above it the result is fp32 BLAS
    (PREFILL_MIN_T_FLOAT for F16/BF16/F32 weights), except for the AMX kinds
    (see PREFILL_MIN_T), which keep int8 activations at every T.
    """
    check_matmul_args(out, x, w)
    t = x.shape[0]
    if t == 0 or w.rows == 0:
        return
    if use_reference():
        ref_linear.matmul(out, x, w)
    elif _use_blas(w, t):
        gemm_blas.blas_matmul(out, x, w)
    elif CHUNK <= 0:
        _small_t(out, x, w)
    else:
        setter = _chunk_setter()
        old = setter(CHUNK)
        try:
            _small_t(out, x, w)
        finally:
            setter(old)


def _use_blas(w: Weight, t: int) -> bool:
    if w.dtype in _FLOAT:
        return t >= PREFILL_MIN_T_FLOAT or (w.dtype is DataType.F32 and t == 1)  # sgemv is fine
    if not _int_path_ok(w):  # I8/I4 rows that are not whole 32-blocks
        return True
    return t >= PREFILL_MIN_T and not _tile_prefill(w, t)


def _tile_prefill(w: Weight, t: int) -> bool:
    """True when the int8 tile kernels beat dequantize + BLAS for this prefill (measured bounds per kind):
    the AMX tiles where the CPU has them, else the 512-bit register tiles (gemm_tile) up to ZMM_PREFILL_MAX_T."""
    kind = quant.KIND[w.dtype]
    if gemm_int.HAS_AMX and kind in gemm_tile_amx.PREFILL_MAX_T:
        return t <= gemm_tile_amx.PREFILL_MAX_T[kind]
    return qdot_tile.HAS_VNNI512 and kind in gemm_tile.TILE_KINDS and t <= ZMM_PREFILL_MAX_T.get(kind, 0)


ZMM_PREFILL_MAX_T = {
    quant.KIND[DataType.Q4_0]: 96,
    quant.KIND[DataType.Q8_0]: 96,
    quant.KIND[DataType.Q4_K]: 96,
    quant.KIND[DataType.Q6_K]: 256,
}
"""Per kind: up to this many tokens the 512-bit register-tile kernel (AVX512-VNNI, no AMX) runs prefill
instead of dequantize + BLAS. `benchmarks/small_gemm.py --blas --tokens 32,64,128,256,512` (2 threads,
TinyLlama layers, load ~3): with MODELC_NO_AMX=1, tile vs BLAS x2.2 / x1.3 / x0.96 / x0.77 (Q4_0) and
x2.4 / x1.4 / x0.96 / x0.79 (Q4_K) at T = 32 / 64 / 128 / 256; Q6_K (no AMX path) x7.1 / x4.1 / x2.2 /
x1.2 / x0.69 at T = 32 ... 512. Without AVX512-VNNI (256-bit halves) nothing was measured: BLAS."""


_setter = None


def _chunk_setter():
    """numba.set_parallel_chunksize without its per-call thread-pool check (~10 us).

    After one public call has started the pool, numba's raw setter (a ctypes
    function, thread-local state) is used; the public one if numba moves it.
    """
    global _setter
    if _setter is None:
        numba.set_parallel_chunksize(numba.get_parallel_chunksize())  # starts the pool
        from numba.np.ufunc import parallel

        _setter = getattr(parallel, "_set_parallel_chunksize", None) or numba.set_parallel_chunksize
    return _setter


def _small_t(out: np.ndarray, x: np.ndarray, w: Weight) -> None:
    t, c = x.shape
    if w.dtype is DataType.F32:
        gemm_float.smatmul(out, x, w.blocks.view(np.float32))
        return
    if w.dtype in _FLOAT:
        gemm_float.hmatmul(out, x, w.blocks, w.dtype is DataType.BF16)
        return
    xq = np.empty((t, c), np.int8)  # (T, C)
    xd = np.empty((t, c // 32), np.float32)  # (T, C/32)
    xs = np.empty((t, c // 16), np.float32)  # (T, C/16)
    quant.quantize_act(xq, xd, xs, x)
    kind = quant.KIND[w.dtype]
    if t == 1 and kind in gemm_fused_k.KINDS:
        gemm_fused_k.qmatvec_k(out, xq, xd, xs, w.blocks, kind)
    elif t == 1 and kind in gemm_fused_iq.KINDS:
        gemm_fused_iq.qmatvec_iq(out, xq, xd, xs, w.blocks, kind)
    elif t == 1 and kind in gemm_fused.FUSED_KINDS:
        gemm_fused.qmatvec(out, xq, xd, xs, w.blocks, kind)
    else:
        rscale = _ONE if w.scale is None else w.scale
        gemm_int.qmatmul(out, xq, xd, xs, w.blocks, kind, rscale, w.dtype in quant.SIGNED)


def dequantize(t: TensorData, scale: TensorData | None = None) -> np.ndarray:
    """Any stored tensor -> (rows, cols) f32 (leading dims flattened into rows)."""
    rows, _ = rows_cols(t)
    return dequantize_rows(t, np.arange(rows, dtype=np.int64), scale)


def dequantize_rows(t: TensorData, row_ids: np.ndarray, scale: TensorData | None = None) -> np.ndarray:
    """Rows `row_ids` of a (V, C) table -> (len(row_ids), C) f32, touching only those rows."""
    w = make_weight(t, scale, table=True)
    if use_reference() or (w.dtype in quant.KIND and not _int_path_ok(w)):
        return ref_linear.dequantize_rows(t, row_ids, scale)
    ids = check_row_ids(row_ids, w.rows)
    out = np.empty((ids.shape[0], w.cols), np.float32)  # (R, C)
    if ids.size:
        gemm_blas.dequantize_into(out, w, ids)
    return out
