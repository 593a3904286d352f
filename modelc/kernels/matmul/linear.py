"""Public matmul API: prepare a stored weight once, then out = x @ W.T on its stored dtype.

The kernel for a (weight type, T, CPU) is plan.plan_matmul (the one table), fixed per weight when
the Weight is made (plan.fixed_paths: MODELC_KERNELS=ref applies to weights made after it is set). Few tokens
(decode, small batches) run the int8-activation kernels or the fp16/bf16 kernels
(gemm_float); prefill runs the int8 tiles or dequantizes W panel by panel into per-thread
scratch and calls BLAS (gemm_blas). MODELC_KERNELS=ref runs the numpy twins (ref_linear).
No fp32 copy of a whole weight is ever kept. Threads: numba.set_num_threads, set by the caller.
"""

from __future__ import annotations

import os

# NOTE: libgomp (numba's default `omp` threading layer) reads this when it loads, at
# the first parallel kernel; modelc/spin.py sets it (and a short GOMP_SPINCOUNT) and says why.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numba  # noqa: E402
import numpy as np  # noqa: E402

from modelc.ir import DataType, TensorData
from modelc.kernels.matmul import (
    gemm_blas,
    gemm_float,
    gemm_fused,
    gemm_fused_iq,
    gemm_fused_k,
    gemm_int,
    gemm_r16,
    gemm_tile,
    gemm_tile_amx,
    gemm_tile_bf16,
    plan,
)
from modelc.kernels.matmul.gemm_weight import (
    SCALED_TYPES,
    Weight,
    check_matmul_args,
    check_row_ids,
    make_weight,
    rows_cols,
)
from modelc.kernels.matmul.plan import Path
from modelc.kernels.quant import quant
from modelc.kernels.reference import ref_linear
from modelc.kernels.runtime import cpu

__all__ = [
    "Weight",
    "prepare_weight",
    "matmul",
    "dequantize",
    "dequantize_rows",
    "use_reference",
]

CHUNK = cpu.env_int("MODELC_PARALLEL_CHUNK", -1)
"""prange iterations (of 16 output rows each) a thread takes at a time: dynamic
scheduling, so on a busy machine a descheduled thread delays a call by one
chunk, not by half the matrix (matmul-only TinyLlama Q4_0 decode, 2 threads,
busy VM: 6.2 / 7.8 tok/s with chunks of 4 vs 3.4 / 5.7 static). 0 = numba's
static split. -1 (the default): the matrix in about PIECES chunks (`chunk_for`)."""
PIECES = 8
"""Each chunk restarts a thread's stream through the weights (the hardware prefetcher ramps up again):
one T=1 pass over TinyLlama Q4_0's matmuls, paired in one process on a quiet Zen 4, cost 3-15% more with
chunks of 4 than with the static split, ~0-1% more with 8 chunks a matrix (T=8: 5% and ~3%)."""


def chunk_for(rows: int, step_groups: int = 1) -> int:
    """The parallel chunk (in prange steps of `step_groups` 16-row groups) for a matrix of `rows` output rows."""
    return CHUNK if CHUNK >= 0 else max(4 // step_groups, rows // (16 * step_groups * PIECES))


_ONE = np.ones(1, np.float32)
QUANT_ROWS_MIN_T = 64
"""From this many tokens on, matmul quantizes the activations of the int8 paths on every thread
(quant.quantized_rows)."""


def use_reference() -> bool:
    """True when MODELC_KERNELS=ref asks for the numpy reference kernels."""
    return cpu.use_reference()


def prepare_weight(t: TensorData, scale: TensorData | None = None) -> Weight:
    """Wrap a stored (N, C) weight (and its per-row F32 scale for I8/I4) for matmul (zero-copy), with its
    kernel plan fixed now (plan.fixed_paths)."""
    return make_weight(t, scale)


def _int_path_ok(w: Weight) -> bool:
    return w.dtype in quant.KIND and w.cols % 32 == 0


def matmul(out: np.ndarray, x: np.ndarray, w: Weight) -> None:
    """out (T, N) f32 = x (T, C) f32 C-contiguous @ W.T, W (N, C) as stored in `w`.

    The kernel is plan.path(w, T): the weight's fixed plan. Quantized W: x is quantized to int8 blocks (error
    ~5e-3 relative, as in llama.cpp) on the int8 paths; the BLAS path (prefill) is fp32.
    """
    check_matmul_args(out, x, w)
    t = x.shape[0]
    if t == 0 or w.rows == 0:
        return
    path = plan.path(w, t)
    if path is Path.REF:
        ref_linear.matmul(out, x, w)
    elif path is Path.BLAS:
        gemm_blas.blas_matmul(out, x, w)
    elif path is Path.AMX_BF16:  # fp32 activations in, rounded to bf16 inside
        gemm_tile_bf16.qmatmul_bf16_r16(out, x, w.r16, quant.KIND[w.dtype])
    elif path is Path.R16:  # the decode path: quantize and kernel in one numba entry
        kind = quant.KIND[w.dtype]
        pair = 2 if t == 1 and kind in gemm_r16.PAIRED_T1 else 1  # a step of two groups (gemm_r16_parts.pairs_t1)
        chunked(chunk_for(w.rows, pair), gemm_r16.F32_OF_KIND[kind], out, x, w.r16)
    else:
        # many tokens (prefill): the activations quantized on every thread, with numba's static split (under chunked
        # a thread took chunk_for(rows) of the rows' 16 pieces at a time: all of them)
        xq = quant.quantized_rows(x) if t >= QUANT_ROWS_MIN_T and path in INT8_RUN else None
        chunked(chunk_for(w.rows), _run, path, out, x, w, xq)


def chunked(chunk: int, kernel, *args) -> None:
    """kernel(*args) with numba's parallel chunk size set to `chunk` (dynamic scheduling; 0: static)."""
    if chunk <= 0:
        kernel(*args)
        return
    setter = _chunk_setter()
    old = setter(chunk)
    try:
        kernel(*args)
    finally:
        setter(old)


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


INT8_RUN = plan.INT8_PATHS - {Path.R16}
"""The paths _run quantizes the activations for."""


def _run(path: Path, out: np.ndarray, x: np.ndarray, w: Weight, xq: tuple | None = None) -> None:
    """The small-T kernels (every path but REF and BLAS); xq: x already quantized (quant.quantized's three arrays)."""
    if path is Path.FLOAT:
        gemm_float.smatmul(out, x, w.blocks.view(np.float32))
        return
    if path is Path.HALF:
        gemm_float.hmatmul(out, x, w.blocks, w.dtype is DataType.BF16)
        return
    xq, xd, xs = quant.quantized(x) if xq is None else xq  # (T, C) int8, (T, C/32), (T, C/16)
    kind = quant.KIND[w.dtype]
    if path is Path.MATVEC_K:
        gemm_fused_k.qmatvec_k(out, xq, xd, xs, w.blocks, kind)
    elif path is Path.MATVEC_IQ:
        gemm_fused_iq.qmatvec_iq(out, xq, xd, xs, w.blocks, kind)
    elif path is Path.MATVEC:
        gemm_fused.qmatvec(out, xq, xd, xs, w.blocks, kind)
    elif path is Path.AMX:
        gemm_tile_amx.qmatmul_amx(out, xq, xd, xs, w.blocks, kind)
    elif path is Path.AMX_R16:
        gemm_tile_amx.qmatmul_amx_r16(out, xq, xd, xs, w.r16, kind)
    elif path is Path.TILE:
        gemm_tile.qmatmul_tile(out, xq, xd, xs, w.blocks, kind)
    else:
        rscale = _ONE if w.scale is None else w.scale
        gemm_int.qmatmul_rows(out, xq, xd, xs, w.blocks, kind, rscale, w.dtype in quant.SIGNED)


LOOKUP_MAX_ROWS = 64
"""Up to this many rows a lookup runs on the calling thread (no pool wake-up), from the file's bytes."""
_LOOKUP_KINDS = {dt: k for dt, k in quant.KIND.items() if dt not in SCALED_TYPES}


def _lookup(t: TensorData, ids: np.ndarray, kind: int) -> np.ndarray:
    """dequantize_rows for a few rows of a block-quantized table (an embedding lookup, once a forward), with
    no Weight made for it: a decode token's lookup ran at 140-190 us in a forward (its Python runs cold
    after the last token's kernels), ~45% of it building the Weight's kernel plan that a lookup never uses."""
    rows = t.shape[0]
    if ids.shape[0] == 1:
        if not 0 <= int(ids[0]) < rows:
            check_row_ids(ids, rows)  # raises RowIdError
    else:
        ids = check_row_ids(ids, rows)
    out = np.empty((ids.shape[0], t.shape[1]), np.float32)  # (R, C)
    quant.rows_1t(out, t.data.reshape(rows, -1), ids, kind, _ONE, quant.family(kind))
    return out


def dequantize(t: TensorData, scale: TensorData | None = None) -> np.ndarray:
    """Any stored tensor -> (rows, cols) f32 (leading dims flattened into rows)."""
    rows, _ = rows_cols(t)
    return dequantize_rows(t, np.arange(rows, dtype=np.int64), scale)


def dequantize_rows(t: TensorData, row_ids: np.ndarray, scale: TensorData | None = None) -> np.ndarray:
    """Rows `row_ids` of a (V, C) table -> (len(row_ids), C) f32, touching only those rows."""
    kind = _LOOKUP_KINDS.get(t.dtype)
    if kind is not None and scale is None and len(t.shape) == 2 and t.shape[1] % 32 == 0 and not use_reference():
        ids = np.ascontiguousarray(row_ids, dtype=np.int64).reshape(-1)
        if ids.shape[0] < LOOKUP_MAX_ROWS:
            return _lookup(t, ids, kind)
    w = make_weight(t, scale, table=True)
    if use_reference() or (w.dtype in quant.KIND and not _int_path_ok(w)):
        return ref_linear.dequantize_rows(t, row_ids, scale)
    ids = check_row_ids(row_ids, w.rows)
    out = np.empty((ids.shape[0], w.cols), np.float32)  # (R, C)
    if ids.size:
        gemm_blas.dequantize_into(out, w, ids)
    return out
