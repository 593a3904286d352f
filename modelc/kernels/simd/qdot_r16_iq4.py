"""SIMD pieces of the 16-row interleaved IQ4_NL / IQ4_XS kernels (gemm_r16_iq4): the code book lookup
on 64 nibbles at once, and the 16 rows' 16-bit IQ4_XS high scale bits.

`lut_iq4_i8x64(v)` maps 64 nibbles (0..15) to KVALUES_IQ4NL + 128 (1..241, unsigned bytes) so the
unsigned x signed dot (vpdpbusd) takes them; the kernel subtracts 128 * the activation code sum. On AVX2
without VNNI (CODE_OFFSET 0) it maps them to the signed values, for the signed dot.
AVX-512 BW: one 512-bit `vpshufb` (the table in each 128-bit lane); AVX2: two 256-bit ones; without
AVX2 a chain of 16 vector selects: qdot_iq._lut64, the IQ4_XS super-block dot's lookup, at offset 128.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from modelc.kernels.quant.iq_tables import KVALUES_IQ4NL
from modelc.kernels.simd.qdot_iq import _lut64
from modelc.kernels.simd.qdot_tile import WIDE_DOT_EXACT, I8x64, I32x16, _check_1d, _load

_i16, _i32 = ir.IntType(16), ir.IntType(32)
CODE_OFFSET = 0 if not WIDE_DOT_EXACT else 128
"""What the lookup adds to each code book value: with 128 (the unsigned dot) the kernel starts each block dot at
-128 * sum(x codes); on AVX2 without VNNI the values stay signed for the signed dot (gemm_r16.SIGNED_DOT)."""


@intrinsic
def lut_iq4_i8x64(typingctx, v):
    """Per byte: KVALUES_IQ4NL[v] + CODE_OFFSET (v: nibbles 0..15; 1..241 as unsigned bytes, or the signed values)."""
    if v != I8x64:
        return None

    def codegen(context, builder, sig, args):
        return _lut64(builder, args[0], KVALUES_IQ4NL, CODE_OFFSET)

    return I8x64(v), codegen


@intrinsic
def load_u16x16(typingctx, ary, idx):
    """16 little-endian 16-bit words at byte idx of a 1-D C uint8 array, zero-extended to I32x16."""
    if not (_check_1d(ary) and ary.dtype == types.uint8 and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        v = _load(context, builder, sig.args[0], args[0], args[1], ir.VectorType(_i16, 16))
        return builder.zext(v, ir.VectorType(_i32, 16))

    return I32x16(ary, idx), codegen
