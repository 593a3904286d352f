"""Elementwise activations: SwiGLU (silu(gate) * up), GELU (tanh approximation and exact erf), row softmax.

All float32, C-contiguous; `out` may alias an input.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from modelc.kernels.simd.fastexp import exp_f32

# error_model="numpy" on every kernel here: numba's default ("python") guards each float and
# integer division with a zero check that raises, and that branch stops LLVM from vectorizing
# the loop (measured 10x on SiLU). Inputs never divide by zero here (eps > 0, Z = 16).

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT2 = 1.0 / math.sqrt(2.0)


@njit(cache=True, nogil=True, error_model="numpy")
def silu_mul(out, gate, up):
    """out (T, F) = silu(gate) * up.  gate, up: (T, F) f32."""
    T, F = gate.shape
    for t in range(T):
        for f in range(F):
            g = gate[t, f]
            out[t, f] = g / (np.float32(1.0) + exp_f32(-g)) * up[t, f]


@njit(cache=True, nogil=True, error_model="numpy")
def gelu(out, x):
    """out (T, F) = GELU(x), tanh approximation (GPT-2's gelu_new).

    Uses 0.5 * (1 + tanh(a)) = 1 / (1 + exp(-2a)), which keeps relative accuracy for negative x.
    """
    T, F = x.shape
    c = np.float32(2.0 * _SQRT_2_OVER_PI)
    k = np.float32(0.044715)
    for t in range(T):
        for f in range(F):
            v = x[t, f]
            out[t, f] = v / (np.float32(1.0) + exp_f32(-c * (v + k * v * v * v)))


@njit(cache=True, nogil=True, error_model="numpy")
def gelu_erf(out, x):
    """out (T, F) = exact GELU(x) = x * Phi(x)."""
    T, F = x.shape
    for t in range(T):
        for f in range(F):
            v = np.float64(x[t, f])
            out[t, f] = np.float32(0.5 * v * (1.0 + math.erf(v * _INV_SQRT2)))


@njit(cache=True, nogil=True, error_model="numpy")
def softmax(out, x):
    """out (T, N) = softmax over the last axis of x (T, N) f32."""
    T, N = x.shape
    for t in range(T):
        m = -np.inf
        for n in range(N):
            if x[t, n] > m:
                m = x[t, n]
        s = 0.0
        for n in range(N):
            e = math.exp(np.float64(x[t, n]) - m)
            out[t, n] = np.float32(e)
            s += e
        inv = np.float32(1.0 / s)
        for n in range(N):
            out[t, n] *= inv
