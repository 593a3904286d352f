"""A vectorizable float32 exp for numba kernels (Cephes expf: range reduction + degree-6 polynomial).

numba's math.exp is a scalar libm call that blocks loop vectorization; this one is plain
arithmetic plus a bitcast, so LLVM turns elementwise loops (SiLU, softmax) into AVX2 code.
Accuracy: within 2 ulp of the correctly rounded exp over [-87, 88]; inputs are clamped there.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

# error_model="numpy" on every kernel here: numba's default ("python") guards each float and
# integer division with a zero check that raises, and that branch stops LLVM from vectorizing
# the loop (measured 10x on SiLU). Inputs never divide by zero here (eps > 0, Z = 16).


@intrinsic
def _i32_bits_to_f32(typingctx, bits):
    if bits != types.int32:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def exp_f32(x):
    """exp(x) for a float32 x, as float32.

    Branch-free (selects only, no libm calls) so loops calling it vectorize.
    """
    x = np.float32(x)
    x = x if x > np.float32(-87.3) else np.float32(-87.3)  # also maps NaN to the low clamp
    x = x if x < np.float32(88.3) else np.float32(88.3)
    z = x * np.float32(1.44269504088896341)
    k = np.int32(z + (np.float32(0.5) if z >= np.float32(0.0) else np.float32(-0.5)))  # round half away
    fx = np.float32(k)
    r = x - fx * np.float32(0.693359375) - fx * np.float32(-2.12194440e-4)
    rr = r * r
    y = np.float32(1.9875691500e-4)
    y = y * r + np.float32(1.3981999507e-3)
    y = y * r + np.float32(8.3334519073e-3)
    y = y * r + np.float32(4.1665795894e-2)
    y = y * r + np.float32(1.6666665459e-1)
    y = y * r + np.float32(5.0000001201e-1)
    y = y * rr + r + np.float32(1.0)
    return y * _i32_bits_to_f32(np.int32((k + np.int32(127)) << np.int32(23)))


WEIGHT_CUT = np.float32(-44.0)
"""exp_weight's cut: e^-44 ~ 7.8e-20, below 2^-63."""


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def exp_weight(x):
    """exp_f32(x) for an attention weight (x = a score minus the row's maximum, so x <= 0), 0 below WEIGHT_CUT.

    A weight that small is lost to rounding in everything it is added to (the row's sum holds its largest weight,
    1; a row of up to 2^36 positions of them adds less than 2^-27), but multiplied by a V element it makes products
    below float32's normal range, and every FMA on a subnormal takes a microcode assist on Intel cores: rows where
    most weights are tiny (large score spreads: models with random weights, sharply peaked heads) ran TinyLlama's
    decode attention at 4096 positions 4.5x slower on Emerald Rapids (22 layers, one thread: 20 -> 90+ ms)."""
    return exp_f32(x) if x > WEIGHT_CUT else np.float32(0.0)
