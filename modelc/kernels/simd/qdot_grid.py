"""SIMD pieces for the grid i-quants (IQ2_*, IQ3_*, IQ1_*) and TQ1_0, read straight from the stored blocks.

A grid type's 32 weights of a sub-block are four 8-byte grid rows (IQ3: eight
4-byte rows) looked up by scalar index and joined in a register by
`grid_i8x32` (no store to memory); their signs are 32 bits that
`signs_i8x32` applies to the activations instead (x * -1 where a bit is set,
the trick llama.cpp's AVX2 kernels use), so the weights stay unsigned grid
values (IQ2: 8..43, IQ3: 4..62) and the dot is qdot.dotu_i8x32. TQ1_0's
base-3 bytes become trits in registers (`trits_i8x32` and friends: the byte
times 3^n mod 256, times 3, high byte). Scalar unaligned loads: `u16_at`,
`u32_at`. Portable LLVM IR throughout: LLVM lowers it for the host
(vpshufb / vpcmpeqb / vpmullw with AVX2), so MODELC_NO_* need no second path.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from modelc.kernels.simd.qdot import I8x32, _check_1d, _ptr_at

_i8, _i16, _i32, _i64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
_v32i8 = ir.VectorType(_i8, 32)


def _mask(idx):
    return ir.Constant(ir.VectorType(_i32, len(idx)), list(idx))


def _load_scalar(context, builder, sig, args, llty):
    p = _ptr_at(context, builder, sig.args[0], args[0], args[1], llty)
    return builder.zext(builder.load(p, align=1), _i64)


@intrinsic
def u16_at(typingctx, ary, idx):
    """The little-endian uint16 at byte ary[idx] (uint8 1-D C array, any alignment), as int64."""
    if not (_check_1d(ary) and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        return _load_scalar(context, builder, sig, args, _i16)

    return types.int64(ary, idx), codegen


@intrinsic
def u32_at(typingctx, ary, idx):
    """The little-endian uint32 at byte ary[idx] (uint8 1-D C array, any alignment), as int64."""
    if not (_check_1d(ary) and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        return _load_scalar(context, builder, sig, args, _i32)

    return types.int64(ary, idx), codegen


@intrinsic
def grid_i8x32(typingctx, a, b, c, d):
    """I8x32 of the four 64-bit words a, b, c, d (bytes 0-7, 8-15, 16-23, 24-31; little-endian)."""
    if not all(isinstance(v, types.Integer) for v in (a, b, c, d)):
        return None

    def codegen(context, builder, sig, args):
        v4 = ir.VectorType(_i64, 4)
        v = ir.Constant(v4, ir.Undefined)
        for k, (val, ty) in enumerate(zip(args, sig.args, strict=True)):
            if ty.bitwidth < 64:
                val = builder.zext(val, _i64) if not ty.signed else builder.sext(val, _i64)
            v = builder.insert_element(v, val, ir.Constant(_i32, k))
        return builder.bitcast(v, _v32i8)

    return I8x32(a, b, c, d), codegen


@intrinsic
def signs_i8x32(typingctx, x, bits):
    """x with lane j negated where bit j of the 32-bit word `bits` is set (|x| <= 127, so never wraps)."""
    if not (x == I8x32 and isinstance(bits, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        xv, b = args
        b32 = builder.trunc(b, _i32) if b.type.width > 32 else b
        bytes4 = builder.bitcast(b32, ir.VectorType(_i8, 4))
        spread = builder.shuffle_vector(bytes4, bytes4, _mask([j // 8 for j in range(32)]))  # lane j: byte j // 8
        sel = ir.Constant(_v32i8, [1 << (j % 8) for j in range(32)])
        hit = builder.icmp_unsigned("==", builder.and_(spread, sel), sel)
        m = builder.sext(hit, _v32i8)  # 0xFF where negated
        return builder.sub(builder.xor(xv, m), m)

    return I8x32(x, bits), codegen


def _trit(builder, v, pows):
    """Lane-wise trit of base-3 bytes v (<32 x i8>): ((v * p mod 256) * 3) >> 8, p the lane's power of 3."""
    t = builder.mul(v, ir.Constant(_v32i8, [p & 0xFF for p in pows]))
    v16 = ir.VectorType(_i16, 32)
    t = builder.lshr(builder.mul(builder.zext(t, v16), ir.Constant(v16, [3] * 32)), ir.Constant(v16, [8] * 32))
    return builder.trunc(t, _v32i8)


def _trit_typer(ary, idx, body):
    if not (_check_1d(ary) and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        def load(n, k=0):  # n bytes from ary[idx + k]
            i = builder.add(args[1], ir.Constant(args[1].type, k))
            return builder.load(_ptr_at(context, builder, sig.args[0], args[0], i, ir.VectorType(_i8, n)), align=1)

        return body(load, builder)

    return I8x32(ary, idx), codegen


def _tq1_mid(n):
    def body(load, builder):
        v = load(16, 32)
        v = builder.shuffle_vector(v, v, _mask([*range(16), *range(16)]))
        return _trit(builder, v, [3**n] * 16 + [3 ** (n + 1)] * 16)

    return body


def _tq1_last(load, builder):
    mid = load(16, 32)  # bytes 32..47, fifth trit: elements 224..239
    tail = load(4, 48)  # bytes 48..51, four trits each: element 240 + 4n + m = trit n of byte m
    tail16 = builder.shuffle_vector(tail, tail, _mask([m for _ in range(4) for m in range(4)]))
    v = builder.shuffle_vector(mid, tail16, _mask(range(32)))
    return _trit(builder, v, [81] * 16 + [3**n for n in range(4) for _ in range(4)])


def _tq1_intrinsic(name, body, doc):
    def typer(typingctx, ary, idx):
        return _trit_typer(ary, idx, body)

    typer.__name__ = typer.__qualname__ = name
    typer.__doc__ = doc
    return intrinsic(typer)


@intrinsic
def trits_i8x32(typingctx, ary, idx, p):
    """Trits ((byte * p mod 256) * 3) >> 8 of the 32 bytes ary[idx:idx+32] (TQ1_0's first 160 elements: p = 3^n)."""
    if not (_check_1d(ary) and isinstance(idx, types.Integer) and isinstance(p, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        v = builder.load(_ptr_at(context, builder, sig.args[0], args[0], args[1], _v32i8), align=1)
        p8 = builder.trunc(args[2], _i8) if args[2].type.width > 8 else args[2]
        pv = builder.insert_element(ir.Constant(_v32i8, ir.Undefined), p8, ir.Constant(_i32, 0))
        t = builder.mul(v, builder.shuffle_vector(pv, pv, _mask([0] * 32)))
        return _trit(builder, t, [1] * 32)

    return I8x32(ary, idx, p), codegen


# The TQ1_0 elements 160..255 (trits_i8x32 gives 0..159: bytes 0..31 with p = 1, 3, 9, 27, 81).
tq1_5 = _tq1_intrinsic(
    "tq1_5", _tq1_mid(0), "TQ1_0 elements 160..191 of the block at byte idx (bytes 32..47, trits 1, 2)."
)
tq1_6 = _tq1_intrinsic("tq1_6", _tq1_mid(2), "TQ1_0 elements 192..223 (bytes 32..47, third and fourth trits).")
tq1_7 = _tq1_intrinsic(
    "tq1_7", _tq1_last, "TQ1_0 elements 224..255 (bytes 32..47 fifth trit, bytes 48..51 four trits)."
)
