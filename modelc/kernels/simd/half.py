"""IEEE half <-> float32 conversion inside numba kernels (numba has no CPU float16).

fp16 data is stored as uint16 bit patterns; these LLVM intrinsics compile to
`vcvtph2ps`/`vcvtps2ph` on F16C CPUs and to a libcall elsewhere.
"""

from __future__ import annotations

from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic


@intrinsic
def _f16_bits_to_f32(typingctx, bits):
    if bits != types.uint16:
        return None

    def codegen(context, builder, sig, args):
        h = builder.bitcast(args[0], ir.HalfType())
        return builder.fpext(h, ir.FloatType())

    return types.float32(types.uint16), codegen


@intrinsic
def _f32_to_f16_bits(typingctx, x):
    if x != types.float32:
        return None

    def codegen(context, builder, sig, args):
        h = builder.fptrunc(args[0], ir.HalfType())
        return builder.bitcast(h, ir.IntType(16))

    return types.uint16(types.float32), codegen


@njit(cache=True, nogil=True, inline="always")
def half_to_float(bits):
    """uint16 fp16 bit pattern -> float32."""
    return _f16_bits_to_f32(bits)


@njit(cache=True, nogil=True, inline="always")
def float_to_half(x):
    """float32 -> uint16 fp16 bit pattern (round to nearest even)."""
    return _f32_to_f16_bits(x)
