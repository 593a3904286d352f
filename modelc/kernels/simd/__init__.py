"""SIMD building blocks the kernels inline: numba vector types and llvmlite intrinsics (int8 dots per
layout, fp16 conversion, a vectorizable exp)."""
