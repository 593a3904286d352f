"""Numpy twins of modelc.kernels.elementwise.encoder (same names and signatures), written to be obviously right."""

from __future__ import annotations

import math

import numpy as np

_erf64 = np.frompyfunc(math.erf, 1, 1)


def erf(out: np.ndarray, x: np.ndarray) -> None:
    """out (N,) f32 = erf(x)."""
    out[:] = _erf64(x.astype(np.float64)).astype(np.float64).astype(np.float32)


def gelu_erf(out: np.ndarray, x: np.ndarray) -> None:
    """out (N,) f32 = 0.5 x (1 + erf(x / sqrt 2))."""
    v = x.astype(np.float64)
    e = _erf64(v / math.sqrt(2.0)).astype(np.float64)
    out[:] = (0.5 * v * (1.0 + e)).astype(np.float32)
