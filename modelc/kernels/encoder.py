"""Encoder/ONNX elementwise kernels numpy lacks: erf and exact (erf) GELU over flat float32 arrays.

numpy has no erf and scipy is not a dependency, so these are the fast path for the ONNX
interpreter's Erf/Gelu and BERT's FFN. Numpy twins live in ref_encoder.py.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

_INV_SQRT2 = 1.0 / math.sqrt(2.0)


@njit(cache=True, nogil=True)
def erf(out, x):
    """out (N,) f32 = erf(x).  x: (N,) f32 contiguous; out may alias x."""
    for i in range(x.shape[0]):
        out[i] = np.float32(math.erf(np.float64(x[i])))


@njit(cache=True, nogil=True)
def gelu_erf(out, x):
    """out (N,) f32 = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)).  x: (N,) f32 contiguous; out may alias x."""
    for i in range(x.shape[0]):
        v = np.float64(x[i])
        out[i] = np.float32(0.5 * v * (1.0 + math.erf(v * _INV_SQRT2)))
