"""SIMD pieces of the 16-row interleaved kernels (gemm_r16): one 512-bit vector holds 4 bytes of
each of 16 weight rows, and one activation's 4 bytes are broadcast to every lane.

Lane l of a dot is then row l's partial sum, so after a block's 8 dots each lane holds a whole
32-element block dot of its row: the float work (convert, scale, fma) is done once per 16 rows,
not once per (row, 64 elements) as with row-major blocks.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from modelc.kernels.simd.qdot_tile import I8x64, I32x16, _check_1d, _load

_i8, _i32 = ir.IntType(8), ir.IntType(32)
_v64i8 = ir.VectorType(_i8, 64)
_v16i32 = ir.VectorType(_i32, 16)


@intrinsic
def nib_lo_i8x64(typingctx, v):
    """v & 15 per byte (the low nibbles: unsigned 0..15)."""
    if v != I8x64:
        return None

    def codegen(context, builder, sig, args):
        return builder.and_(args[0], ir.Constant(_v64i8, [15] * 64))

    return I8x64(v), codegen


@intrinsic
def nib_hi_i8x64(typingctx, v):
    """v >> 4 per byte (the high nibbles: unsigned 0..15)."""
    if v != I8x64:
        return None

    def codegen(context, builder, sig, args):
        return builder.lshr(args[0], ir.Constant(_v64i8, [4] * 64))

    return I8x64(v), codegen


@intrinsic
def nib_hi16_i8x64(typingctx, v):
    """v & 0xF0 per byte: 16 x the high nibble, in place (one op; nib_hi_i8x64 takes two on x86, a word shift and a
    mask). Its dot is 16 x the high nibbles' dot: exact only where the dot takes codes up to 255 (WIDE_DOT_EXACT)."""
    if v != I8x64:
        return None

    def codegen(context, builder, sig, args):
        return builder.and_(args[0], ir.Constant(_v64i8, [-16] * 64))

    return I8x64(v), codegen


@intrinsic
def flip_i8x64(typingctx, v):
    """v ^ 0x80 per byte: signed codes -128..127 as unsigned 0..255 (code + 128)."""
    if v != I8x64:
        return None

    def codegen(context, builder, sig, args):
        return builder.xor(args[0], ir.Constant(_v64i8, [-128] * 64))

    return I8x64(v), codegen


@intrinsic
def bcast4_i8x64(typingctx, ary, idx):
    """The 4 bytes at element idx of a 1-D C int8 array, repeated in all 16 lanes."""
    if not (_check_1d(ary) and ary.dtype == types.int8 and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        w = _load(context, builder, sig.args[0], args[0], args[1], _i32)
        v = builder.insert_element(ir.Constant(ir.VectorType(_i32, 1), ir.Undefined), w, ir.Constant(_i32, 0))
        s = builder.shuffle_vector(v, v, ir.Constant(_v16i32, [0] * 16))
        return builder.bitcast(s, _v64i8)

    return I8x64(ary, idx), codegen


@intrinsic
def splat_i32x16(typingctx, k):
    """16 copies of the integer k (as int32)."""
    if not isinstance(k, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        x = args[0]
        w = x.type.width
        x = builder.trunc(x, _i32) if w > 32 else (builder.sext(x, _i32) if w < 32 else x)
        v = builder.insert_element(ir.Constant(ir.VectorType(_i32, 1), ir.Undefined), x, ir.Constant(_i32, 0))
        return builder.shuffle_vector(v, v, ir.Constant(_v16i32, [0] * 16))

    return I32x16(k), codegen


@intrinsic
def add_i32x16(typingctx, a, b):
    if not (a == I32x16 and b == I32x16):
        return None

    def codegen(context, builder, sig, args):
        return builder.add(args[0], args[1])

    return I32x16(a, b), codegen


@intrinsic
def sub_i32x16(typingctx, a, b):
    """a - b per lane (wrapping)."""
    if not (a == I32x16 and b == I32x16):
        return None

    def codegen(context, builder, sig, args):
        return builder.sub(args[0], args[1])

    return I32x16(a, b), codegen


@intrinsic
def mul_i32x16(typingctx, a, b):
    """a * b per lane (low 32 bits)."""
    if not (a == I32x16 and b == I32x16):
        return None

    def codegen(context, builder, sig, args):
        return builder.mul(args[0], args[1])

    return I32x16(a, b), codegen


@intrinsic
def sra4_i32x16(typingctx, v):
    """v >> 4 per lane, arithmetic (v / 16 exactly where v is a multiple of 16)."""
    if v != I32x16:
        return None

    def codegen(context, builder, sig, args):
        return builder.ashr(args[0], ir.Constant(_v16i32, [4] * 16))

    return I32x16(v), codegen


@intrinsic
def load_u32x16(typingctx, ary, idx):
    """16 little-endian 32-bit words at byte idx of a 1-D C uint8 array, as I32x16."""
    if not (_check_1d(ary) and ary.dtype == types.uint8 and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        return _load(context, builder, sig.args[0], args[0], args[1], _v16i32)

    return I32x16(ary, idx), codegen


def _as_i32(builder, x):
    w = x.type.width
    return builder.trunc(x, _i32) if w > 32 else (builder.sext(x, _i32) if w < 32 else x)


def _splat32(builder, x):
    v = builder.insert_element(
        ir.Constant(ir.VectorType(_i32, 1), ir.Undefined), _as_i32(builder, x), ir.Constant(_i32, 0)
    )
    return builder.shuffle_vector(v, v, ir.Constant(_v16i32, [0] * 16))


@intrinsic
def bits_i32x16(typingctx, v, shift, mask):
    """(v >> shift) & mask per lane (logical shift)."""
    if not (v == I32x16 and isinstance(shift, types.Integer) and isinstance(mask, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        s = builder.lshr(args[0], _splat32(builder, args[1]))
        return builder.and_(s, _splat32(builder, args[2]))

    return I32x16(v, shift, mask), codegen


@intrinsic
def or_shl_i32x16(typingctx, a, b, shift):
    """a | (b << shift) per lane."""
    if not (a == I32x16 and b == I32x16 and isinstance(shift, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        return builder.or_(args[0], builder.shl(args[1], _splat32(builder, args[2])))

    return I32x16(a, b, shift), codegen


@intrinsic
def float_i32x16(typingctx, v):
    """float32 of each int32 lane."""
    from modelc.kernels.simd.qdot import F32x16

    if v != I32x16:
        return None

    def codegen(context, builder, sig, args):
        return builder.sitofp(args[0], ir.VectorType(ir.FloatType(), 16))

    return F32x16(v), codegen
