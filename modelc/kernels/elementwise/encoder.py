"""Encoder/ONNX elementwise kernels numpy lacks: erf and exact-erf GELU over flat float32 arrays.

numpy has no erf and scipy is not a dependency, so these are the fast path for the ONNX
interpreter's Erf/Gelu and BERT's FFN. Numpy twins (libm erf in float64) live in ref_encoder.py.

erf is the float32 rational approximation used by Eigen/XLA: x * P(x^2) / Q(x^2) on x clamped
to [-4, 4], |error| <= 5e-7 (a few float32 ulp). It has no exp and no branch, so LLVM
vectorizes the loop; libm erf in a scalar loop was a fifth of MiniLM's forward time.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_A = (-1.60960333262415e-02, -2.95459980854025e-03, -7.34990630326855e-04, -5.69250639462346e-05,
      -2.10102402082508e-06, 2.77068142495902e-08, -2.72614225801306e-10)  # fmt: skip  # odd numerator, x^1..x^13
_B = (-1.42647390514189e-02, -7.37332916720468e-03, -1.68282697438203e-03, -2.13374055278905e-04,
      -1.45660718464996e-05)  # fmt: skip  # even denominator, x^0..x^8
A1, A3, A5, A7, A9, A11, A13 = (np.float32(a) for a in _A)
B0, B2, B4, B6, B8 = (np.float32(b) for b in _B)
_INV_SQRT2 = np.float32(0.7071067811865476)


@njit(cache=True, nogil=True, inline="always", fastmath=True, error_model="numpy")
def _erf32(x):
    x = min(max(x, np.float32(-4.0)), np.float32(4.0))
    x2 = x * x
    p = ((((((A13 * x2 + A11) * x2 + A9) * x2 + A7) * x2 + A5) * x2 + A3) * x2 + A1) * x
    q = (((B8 * x2 + B6) * x2 + B4) * x2 + B2) * x2 + B0
    return p / q


# fastmath + error_model="numpy": lets LLVM vectorize the loop (Python's error model puts a
# ZeroDivisionError check on the division, which keeps it scalar: 6x slower). q(x^2) < 0 on the
# clamped range so it never divides by zero; the approximation error dwarfs reassociation error.
@njit(cache=True, nogil=True, fastmath=True, error_model="numpy")
def erf(out, x):
    """out (N,) f32 = erf(x), |error| <= 5e-7.  x: (N,) f32 contiguous; out may alias x."""
    for i in range(x.shape[0]):
        out[i] = _erf32(x[i])


@njit(cache=True, nogil=True, fastmath=True, error_model="numpy")
def gelu_erf(out, x):
    """out (N,) f32 = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)).  x: (N,) f32 contiguous; out may alias x."""
    for i in range(x.shape[0]):
        v = x[i]
        out[i] = np.float32(0.5) * v * (np.float32(1.0) + _erf32(v * _INV_SQRT2))
