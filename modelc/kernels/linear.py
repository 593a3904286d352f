"""Public matmul API: prepare a stored weight once, then out = x @ W.T on its stored dtype.

Dispatches to the numba kernels (gemm*.py, quant.py, qdot.py) or, with
MODELC_KERNELS=ref, to the numpy twins in ref_linear.py. No fp32 copy of a
whole weight is ever kept.
"""

from __future__ import annotations

import os

import numpy as np

from modelc.ir import TensorData
from modelc.kernels import ref_linear
from modelc.kernels.gemm_weight import Weight, check_matmul_args, make_weight

__all__ = ["Weight", "prepare_weight", "matmul", "dequantize", "dequantize_rows", "use_reference"]


def use_reference() -> bool:
    """True when MODELC_KERNELS=ref asks for the numpy reference kernels."""
    return os.environ.get("MODELC_KERNELS", "").lower() == "ref"


def prepare_weight(t: TensorData, scale: TensorData | None = None) -> Weight:
    """Wrap a stored (N, C) weight (and its per-row F32 scale for I8/I4) for matmul."""
    return make_weight(t, scale)


def matmul(out: np.ndarray, x: np.ndarray, w: Weight) -> None:
    """out (T, N) f32 = x (T, C) f32 C-contiguous @ W.T, W (N, C) as stored in `w`."""
    check_matmul_args(out, x, w)
    ref_linear.matmul(out, x, w)


def dequantize(t: TensorData, scale: TensorData | None = None) -> np.ndarray:
    """Any stored tensor -> (rows, cols) f32 (leading dims flattened into rows)."""
    return ref_linear.dequantize(t, scale)


def dequantize_rows(t: TensorData, row_ids: np.ndarray, scale: TensorData | None = None) -> np.ndarray:
    """Rows `row_ids` of a (V, C) table -> (len(row_ids), C) f32, touching only those rows."""
    return ref_linear.dequantize_rows(t, row_ids, scale)
