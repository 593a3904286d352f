"""Pack-time magnitude pruning: zero the small entries of float weight matrices. Pure numpy.

Only 2-D (or higher) F32/F16/BF16/F64 tensors are pruned: 1-D tensors are norm gains and
biases, where a zero silences a whole channel. Entries with |x| < threshold become 0 (so
threshold 0 prunes nothing). The pruned tensor is a new owned buffer in the same dtype; a
tensor with nothing to prune is returned as it is (no copy).
"""

from __future__ import annotations

import math

import numpy as np

from modelc.errors import InvalidRequestError
from modelc.ir import DataType, TensorData

_PRUNABLE = (DataType.F32, DataType.F16, DataType.BF16, DataType.F64)


def _as_float(t: TensorData) -> np.ndarray:
    if t.dtype is DataType.BF16:
        return (t.data.view("<u2").astype(np.uint32) << 16).view(np.float32)  # (N,)
    return t.data.view(t.dtype.numpy_dtype)  # (N,)


def prune_tensor(t: TensorData, threshold: float) -> tuple[TensorData, int]:
    """(tensor with |x| < threshold zeroed, number of entries zeroed that were not already 0)."""
    if not math.isfinite(threshold) or threshold < 0:
        raise InvalidRequestError(f"prune threshold must be a finite number >= 0, got {threshold}")
    if t.dtype not in _PRUNABLE or len(t.shape) < 2 or threshold == 0 or t.num_elements == 0:
        return t, 0
    values = _as_float(t)
    mask = np.abs(values) < threshold  # (N,)
    num_zeroed = int(np.count_nonzero(mask & (values != 0)))
    if num_zeroed == 0:
        return t, 0
    out = t.data.copy()
    elem = out.view(np.uint16) if t.dtype in (DataType.BF16, DataType.F16) else out.view(t.dtype.numpy_dtype)
    elem[mask] = 0  # +0.0 in every float layout
    return TensorData(t.shape, t.dtype, out), num_zeroed
