"""Element access for KV pages stored as float32 or as fp16 bit patterns (uint16), usable inside kernels.

`load_f32(v)` widens one stored element; `store_like(x, arr)` narrows a float32 to arr's element type.
Resolved at compile time by numba's overload, so one kernel source serves both page dtypes.
"""

from __future__ import annotations

import numpy as np
from numba import types
from numba.extending import overload

from modelc.kernels.simd.half import float_to_half, half_to_float


def load_f32(v):
    """Python fallback (NUMBA_DISABLE_JIT): a stored element -> float32."""
    if isinstance(v, np.uint16):
        return np.float32(np.array([v], np.uint16).view(np.float16)[0])
    return np.float32(v)


def store_like(x, arr):
    """Python fallback: float32 -> arr's element type (uint16 = fp16 bits)."""
    if arr.dtype == np.uint16:
        return np.array([x], np.float16).view(np.uint16)[0]
    return arr.dtype.type(x)


@overload(load_f32, inline="always")
def _load_f32_impl(v):
    if v == types.uint16:
        return lambda v: half_to_float(v)
    if v == types.float32:
        return lambda v: v
    return None


@overload(store_like, inline="always")
def _store_like_impl(x, arr):
    if arr.dtype == types.uint16:
        return lambda x, arr: float_to_half(np.float32(x))
    if arr.dtype == types.float32:
        return lambda x, arr: np.float32(x)
    return None
