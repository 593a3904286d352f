"""The prepared weight a matmul reads: stored blocks as a (N, row_bytes) view, never a fp32 copy.

No numba here: both the numba path (linear.py) and the numpy twins (ref_linear.py)
take a `Weight`. Validation of shapes, dtypes and scales lives here too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from modelc.errors import FormatError, InvalidRequestError, UnsupportedError
from modelc.ir import DataType, TensorData

# Types a matmul can read. I8/I4 need a per-output-channel F32 scale (NAME@scale).
MATMUL_TYPES = frozenset(
    {
        DataType.F32,
        DataType.F16,
        DataType.BF16,
        DataType.I8,
        DataType.I4,
        DataType.Q4_0,
        DataType.Q4_1,
        DataType.Q5_0,
        DataType.Q5_1,
        DataType.Q8_0,
        DataType.Q2_K,
        DataType.Q3_K,
        DataType.Q4_K,
        DataType.Q5_K,
        DataType.Q6_K,
        DataType.Q8_K,
        DataType.IQ4_NL,
        DataType.IQ4_XS,
        DataType.IQ3_S,
        DataType.IQ3_XXS,
        DataType.IQ2_XXS,
        DataType.IQ2_XS,
        DataType.IQ2_S,
        DataType.IQ1_S,
        DataType.IQ1_M,
        DataType.TQ1_0,
        DataType.TQ2_0,
        DataType.Q1_0,
        DataType.Q2_0,
        DataType.MXFP4,
    }
)
SCALED_TYPES = frozenset({DataType.I8, DataType.I4})


class ShapeError(FormatError):
    """A matmul operand has the wrong shape, dtype or layout."""


class RowIdError(InvalidRequestError):
    """An embedding lookup asked for a row (token id) the table does not have."""


@dataclass(frozen=True, slots=True)
class Weight:
    """A weight matrix W (N, C) as stored: out = x @ W.T.

    blocks: (N, row_bytes) uint8 view of the stored bytes (zero-copy).
    scale: (N,) f32 per-output-channel scale for I8/I4, else None.
    r16: the same bytes repacked 16 rows interleaved (gemm_r16.repack), made by the model loader
    for the numba kernels (models/weights.py); the matmul then runs on it at every T (plan.Path.R16, and
    AMX's prefill plan.Path.AMX_R16), so `blocks` stays unread after the repack.
    paths: the matmul kernel per token count (plan.fixed_paths), fixed when the Weight is made (also by
        dataclasses.replace): MODELC_KERNELS=ref and plan.py's bounds as they are then.
    """

    dtype: DataType
    rows: int  # N
    cols: int  # C
    blocks: np.ndarray  # (N, row_bytes) uint8
    scale: np.ndarray | None  # (N,) f32
    r16: np.ndarray | None = None  # (N/16, C/32 * bytes) uint8: gemm_r16's interleaved copy, when made at load
    paths: tuple = field(default=(), compare=False, repr=False)  # plan.Path per T = 0 .. len-1, set below

    def __post_init__(self) -> None:
        from modelc.kernels.matmul import plan  # here: plan loads the numba kernels, which the numpy twins need not

        object.__setattr__(self, "paths", plan.fixed_paths(self))

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.cols)

    @property
    def nbytes(self) -> int:
        return int(self.blocks.nbytes)


def rows_cols(t: TensorData) -> tuple[int, int]:
    """A tensor's (rows, cols): leading dims flattened into rows, the last dim is cols."""
    if not t.shape:
        return 1, 1
    cols = t.shape[-1]
    rows = 1
    for d in t.shape[:-1]:
        rows *= d
    return rows, cols


def row_blocks(t: TensorData) -> np.ndarray:
    """(rows, row_bytes) uint8 view of any tensor's bytes."""
    rows, cols = rows_cols(t)
    row_bytes = t.dtype.nbytes((cols,))
    return t.data.reshape(rows, row_bytes)


def make_weight(t: TensorData, scale: TensorData | None = None, *, table: bool = False) -> Weight:
    """Validate `t` (+ its @scale for I8/I4) and wrap it as a Weight (no copies).

    table=True accepts any rank (leading dims flattened into rows), for dequantizing.
    """
    if t.dtype not in MATMUL_TYPES:
        raise UnsupportedError(f"kernels do not support tensors of type {t.dtype.value}")
    if len(t.shape) != 2 and not table:
        raise ShapeError(f"a matmul weight must be 2-D (N, C), got shape {t.shape}")
    rows, cols = rows_cols(t)
    scale_arr: np.ndarray | None = None
    if t.dtype in SCALED_TYPES:
        if scale is None:
            raise ShapeError(f"{t.dtype.value} weight of shape {t.shape} needs a per-row F32 scale tensor")
        if scale.dtype is not DataType.F32 or scale.num_elements != rows:
            raise ShapeError(
                f"scale of a {t.shape} {t.dtype.value} weight must be F32 ({rows},), got {scale.dtype.value} {scale.shape}"
            )
        scale_arr = scale.data.view(np.float32).reshape(rows)
    elif scale is not None:
        raise ShapeError(f"a {t.dtype.value} weight takes no scale tensor")
    return Weight(t.dtype, rows, cols, row_blocks(t), scale_arr)


def check_row_ids(row_ids: np.ndarray, rows: int) -> np.ndarray:
    """row_ids as a flat int64 array, every id in [0, rows)."""
    ids = np.ascontiguousarray(row_ids, dtype=np.int64).reshape(-1)
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= rows):
        bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
        raise RowIdError(f"row id {bad} is out of range for a table of {rows} rows")
    return ids


def check_matmul_args(out: np.ndarray, x: np.ndarray, w: Weight) -> None:
    """out (T, N) f32 and x (T, C) f32 C-contiguous, matching w."""
    if x.dtype != np.float32 or x.ndim != 2 or x.shape[1] != w.cols:
        raise ShapeError(f"x must be float32 (T, {w.cols}), got {x.dtype} {x.shape}")
    if out.dtype != np.float32 or out.shape != (x.shape[0], w.rows):
        raise ShapeError(f"out must be float32 ({x.shape[0]}, {w.rows}), got {out.dtype} {out.shape}")
    if not x.flags.c_contiguous or not out.flags.c_contiguous:
        raise ShapeError("x and out must be C-contiguous")
