"""AMX bf16 tile pieces (gemm_tile_bf16): single tile instructions on tiles named by constants, and the conversion of
int8 B-tile codes to bf16 pairs. Only where cpu.HAS_AMX_BF16; no kernel here, no numba functions, only intrinsics.

Tiles are named by integer literals (0..7) and shaped by the last amx_config (qdot_tile); a pointer is an element
index into a 1-D C array (of any dtype), cast to bytes, and a stride is in bytes.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types

from modelc.kernels.simd.qdot import F32x16, _call, _check_1d, _ptr_at, intrinsic
from modelc.kernels.simd.qdot_tile import I32x16

_i8, _i32, _i64, _void, _f32 = ir.IntType(8), ir.IntType(32), ir.IntType(64), ir.VoidType(), ir.FloatType()
_v16i32 = ir.VectorType(_i32, 16)
_v16f32 = ir.VectorType(_f32, 16)


def _lits(*ks) -> bool:
    return all(isinstance(k, types.IntegerLiteral) for k in ks)


def _tile(k) -> ir.Constant:
    return ir.Constant(_i8, k.literal_value)


def _stride(builder, st):
    return builder.sext(st, _i64) if st.type.width < 64 else st


@intrinsic
def tile_zero(typingctx, t):
    """tilezero t."""
    if not _lits(t):
        return None

    def codegen(context, builder, sig, args):
        _call(builder, "llvm.x86.tilezero", _void, [_tile(t)])
        return context.get_dummy_value()

    return types.none(t), codegen


@intrinsic
def tile_load(typingctx, t, ary, idx, stride):
    """tileloadd t from ary at element idx, rows `stride` bytes apart."""
    if not (_lits(t) and _check_1d(ary) and isinstance(idx, types.Integer) and isinstance(stride, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        p = _ptr_at(context, builder, sig.args[1], args[1], args[2], _i8)
        _call(builder, "llvm.x86.tileloadd64", _void, [_tile(t), p, _stride(builder, args[3])])
        return context.get_dummy_value()

    return types.none(t, ary, idx, stride), codegen


@intrinsic
def tile_store(typingctx, t, ary, idx, stride):
    """tilestored t to ary at element idx, rows `stride` bytes apart."""
    if not (_lits(t) and _check_1d(ary) and isinstance(idx, types.Integer) and isinstance(stride, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        p = _ptr_at(context, builder, sig.args[1], args[1], args[2], _i8)
        _call(builder, "llvm.x86.tilestored64", _void, [_tile(t), p, _stride(builder, args[3])])
        return context.get_dummy_value()

    return types.none(t, ary, idx, stride), codegen


@intrinsic
def tile_dpbf16(typingctx, c, a, b):
    """tdpbf16ps: C tile c (fp32) += A tile a (rows of bf16 pairs) . B tile b (VNNI pairs)."""
    if not _lits(c, a, b):
        return None

    def codegen(context, builder, sig, args):
        _call(builder, "llvm.x86.tdpbf16ps", _void, [_tile(c), _tile(a), _tile(b)])
        return context.get_dummy_value()

    return types.none(c, a, b), codegen


def _bf16_bits(builder, f):
    """fp32 -> bf16 bits (round to nearest even; no NaN inputs) in the low 16 bits of each int32 lane."""

    def k(x):
        return ir.Constant(_v16i32, [x] * 16)

    u = builder.bitcast(f, _v16i32)
    u = builder.add(builder.add(u, k(0x7FFF)), builder.and_(builder.lshr(u, k(16)), k(1)))
    return builder.lshr(u, k(16))


@intrinsic
def bf16_pair(typingctx, v, e, dv, mv, signed):
    """Bytes e and e + 1 of each lane of v (int8 B-tile codes of 16 weight rows, unsigned or, where signed, signed)
    -> bf16(code * dv - mv) of the two, packed lo | hi << 16: one row of a bf16 B tile (VNNI pairs), lane m =
    weight row m (e, signed: constants)."""
    if not (v == I32x16 and dv == F32x16 and mv == F32x16 and _lits(e, signed)):
        return None
    first, sgn = e.literal_value, signed.literal_value

    def codegen(context, builder, sig, args):
        v_, _, dv_, mv_, _ = args

        def k(x):
            return ir.Constant(_v16i32, [x] * 16)

        halves = []
        for i in (first, first + 1):
            if sgn:
                c = builder.ashr(builder.shl(v_, k(24 - 8 * i)), k(24))
            else:
                c = builder.and_(builder.lshr(v_, k(8 * i)), k(0xFF))
            f = _call(builder, "llvm.fma.v16f32", _v16f32, [builder.sitofp(c, _v16f32), dv_, builder.fneg(mv_)])
            halves.append(_bf16_bits(builder, f))
        return builder.or_(halves[0], builder.shl(halves[1], k(16)))

    return I32x16(v, e, dv, mv, signed), codegen
