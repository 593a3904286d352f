"""SIMD pieces for the grid i-quants (IQ2_*, IQ3_*, IQ1_*) and TQ1_0, read straight from the stored blocks.

A grid type's 32 weights of a sub-block are four 8-byte grid rows (IQ3: eight
4-byte rows) looked up by scalar index and joined in a register by
`grid_i8x32` (no store to memory); two sub-blocks go side by side
(`join_i8x64`) for one 512-bit dot. Their signs are bits that `signs_i8x64`
applies to the activations instead (x * -1 where a bit is set, the trick
llama.cpp's kernels use; with AVX-512 a mask register and a masked subtract),
so the weights stay unsigned grid values (IQ2: 8..43, IQ3: 4..62) and the dot
is qdot_tile.dot_u8x64. A block's 256 sign bits (`aux8_signs_i8x32`,
`xs_signs_i8x32`, ...: KSIGNS indices with their parity bit computed by
popcount) and its 16 half-sub-block scales (`*_scales_f32x16`,
`nib16_f32x16`, ...) are decoded as vectors once per block. TQ1_0's
base-3 bytes become trits in registers (`trits_i8x32` and friends: the byte
times 3^n mod 256, times 3, high byte). Scalar unaligned loads: `u16_at`,
`u32_at`. Portable LLVM IR but one lane permute (`spread4_f32x16`: vpermps
with AVX-512, element moves without); LLVM lowers the rest for the host, so
MODELC_NO_* need no second path.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from modelc.kernels.runtime.cpu import HAS_AVX512
from modelc.kernels.simd.qdot import F32x16, I8x32, _call, _check_1d, _ptr_at
from modelc.kernels.simd.qdot_tile import I8x64, I32x16

_i8, _i16, _i32, _i64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
_f32 = ir.FloatType()
_v32i8 = ir.VectorType(_i8, 32)
_v64i8 = ir.VectorType(_i8, 64)
_v16f32 = ir.VectorType(_f32, 16)


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


# ---- per-block preparation: the block's 256 sign bits and its 16 half-sub-block scales, as vectors ----------


def _loads(context, builder, sig, args, llty, n, stride):
    """<n x llty> of the words at byte args[1] + stride * j of the uint8 array args[0] (any alignment)."""
    v = ir.Constant(ir.VectorType(llty, n), ir.Undefined)
    for j in range(n):
        i = builder.add(args[1], ir.Constant(args[1].type, stride * j)) if j else args[1]
        val = builder.load(_ptr_at(context, builder, sig.args[0], args[0], i, llty), align=1)
        v = builder.insert_element(v, val, ir.Constant(_i32, j))
    return v


def _with_parity(builder, v):
    """7-bit sign indices (<32 x i8>) -> the 8 sign bits llama.cpp's KSIGNS holds: bit 7 = their parity."""
    odd = builder.and_(_call(builder, "llvm.ctpop.v32i8", _v32i8, [v]), ir.Constant(_v32i8, [1] * 32))
    return builder.or_(v, builder.shl(odd, ir.Constant(_v32i8, [7] * 32)))


def _aux_signs(stride, name):
    def typer(typingctx, ary, idx):
        if not (_check_1d(ary) and isinstance(idx, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            words = _loads(context, builder, sig, args, _i32, 8, stride)  # sub-block j's word
            v32 = ir.VectorType(_i32, 32)
            spread = builder.shuffle_vector(words, words, _mask([j // 4 for j in range(32)]))
            fields = builder.lshr(spread, ir.Constant(v32, [7 * (j % 4) for j in range(32)]))
            v = builder.trunc(builder.and_(fields, ir.Constant(v32, [127] * 32)), _v32i8)
            return _with_parity(builder, v)

        return I8x32(ary, idx), codegen

    typer.__name__ = typer.__qualname__ = name
    typer.__doc__ = (
        f"The 256 sign bits (I8x32, byte 4j + k: group k of sub-block j) of IQ2_XXS / IQ3_XXS's eight aux words "
        f"at byte idx + {stride} * j (four 7-bit KSIGNS indices each, parity bit added)."
    )
    return intrinsic(typer)


def _aux_scales(stride, name):
    def typer(typingctx, ary, idx):
        if not (_check_1d(ary) and isinstance(idx, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            words = _loads(context, builder, sig, args, _i32, 8, stride)
            top = builder.lshr(words, ir.Constant(ir.VectorType(_i32, 8), [28] * 8))
            return builder.uitofp(builder.shuffle_vector(top, top, _mask([j // 2 for j in range(16)])), _v16f32)

        return F32x16(ary, idx), codegen

    typer.__name__ = typer.__qualname__ = name
    typer.__doc__ = f"Lane l = float(the top 4 bits of aux word l // 2 at byte idx + {stride} * (l // 2))."
    return intrinsic(typer)


aux8_signs_i8x32 = _aux_signs(8, "aux8_signs_i8x32")
aux4_signs_i8x32 = _aux_signs(4, "aux4_signs_i8x32")
aux8_scales_f32x16 = _aux_scales(8, "aux8_scales_f32x16")
aux4_scales_f32x16 = _aux_scales(4, "aux4_scales_f32x16")


@intrinsic
def xs_signs_i8x32(typingctx, ary, idx):
    """IQ2_XS's 256 sign bits (I8x32): the 32 uint16 at byte idx, bits 9-15 each (a KSIGNS index), parity added."""
    if not (_check_1d(ary) and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        q = builder.load(_ptr_at(context, builder, sig.args[0], args[0], args[1], ir.VectorType(_i16, 32)), align=1)
        v = builder.trunc(builder.lshr(q, ir.Constant(ir.VectorType(_i16, 32), [9] * 32)), _v32i8)
        return _with_parity(builder, v)

    return I8x32(ary, idx), codegen


def _nibbles(builder, b, n):
    """<2n x i32> of the n bytes b: lane 2j = low nibble of byte j, lane 2j + 1 = its high nibble."""
    v = builder.zext(b, ir.VectorType(_i32, n))
    pairs = builder.shuffle_vector(v, v, _mask([j // 2 for j in range(2 * n)]))
    shifted = builder.lshr(pairs, ir.Constant(ir.VectorType(_i32, 2 * n), [4 * (j % 2) for j in range(2 * n)]))
    return builder.and_(shifted, ir.Constant(ir.VectorType(_i32, 2 * n), [15] * (2 * n)))


@intrinsic
def nib16_f32x16(typingctx, ary, idx):
    """Lane 2j = float(low nibble of byte idx + j), lane 2j + 1 = float(its high nibble) (8 bytes)."""
    if not (_check_1d(ary) and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        b = builder.load(_ptr_at(context, builder, sig.args[0], args[0], args[1], ir.VectorType(_i8, 8)), align=1)
        return builder.uitofp(_nibbles(builder, b, 8), _v16f32)

    return F32x16(ary, idx), codegen


@intrinsic
def nib8_f32x16(typingctx, ary, idx):
    """Lane l = float(nibble l // 2 of the 4 bytes at idx), nibbles low first (IQ3_S's per-sub-block scales)."""
    if not (_check_1d(ary) and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        b = builder.load(_ptr_at(context, builder, sig.args[0], args[0], args[1], ir.VectorType(_i8, 4)), align=1)
        n = _nibbles(builder, b, 4)
        return builder.uitofp(builder.shuffle_vector(n, n, _mask([j // 2 for j in range(16)])), _v16f32)

    return F32x16(ary, idx), codegen


@intrinsic
def iq1s_scales_f32x16(typingctx, ary, idx):
    """IQ1_S: lane l = float(2 * ((qh >> 12) & 7) + 1) of the uint16 qh of sub-block l // 2 at byte idx + 2 (l // 2)."""
    if not (_check_1d(ary) and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        q = builder.zext(_loads(context, builder, sig, args, _i16, 8, 2), ir.VectorType(_i32, 8))
        v8 = ir.VectorType(_i32, 8)
        f = builder.and_(builder.lshr(q, ir.Constant(v8, [12] * 8)), ir.Constant(v8, [7] * 8))
        f = builder.add(builder.shl(f, ir.Constant(v8, [1] * 8)), ir.Constant(v8, [1] * 8))
        return builder.uitofp(builder.shuffle_vector(f, f, _mask([j // 2 for j in range(16)])), _v16f32)

    return F32x16(ary, idx), codegen


@intrinsic
def iq1m_scales_f32x16(typingctx, ary, idx):
    """IQ1_M: lane l = float(2 * s + 1), s the 3-bit field 3 * (l % 4) of the uint16 at byte idx + 2 (l // 4)."""
    if not (_check_1d(ary) and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        q = builder.zext(_loads(context, builder, sig, args, _i16, 4, 2), ir.VectorType(_i32, 4))
        v16 = ir.VectorType(_i32, 16)
        spread = builder.shuffle_vector(q, q, _mask([j // 4 for j in range(16)]))
        f = builder.and_(
            builder.lshr(spread, ir.Constant(v16, [3 * (j % 4) for j in range(16)])), ir.Constant(v16, [7] * 16)
        )
        f = builder.add(builder.shl(f, ir.Constant(v16, [1] * 16)), ir.Constant(v16, [1] * 16))
        return builder.uitofp(f, _v16f32)

    return F32x16(ary, idx), codegen


@intrinsic
def dup8_f32x16(typingctx, ary, idx):
    """Lane l = ary[idx + l // 2] (float32): a block's eight activation scales, one per 16-element half."""
    if not (_check_1d(ary) and ary.dtype == types.float32 and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        v = builder.load(_ptr_at(context, builder, sig.args[0], args[0], args[1], ir.VectorType(_f32, 8)), align=4)
        return builder.shuffle_vector(v, v, _mask([j // 2 for j in range(16)]))

    return F32x16(ary, idx), codegen


@intrinsic
def zeros_i8x32(typingctx):
    def codegen(context, builder, sig, args):
        return ir.Constant(_v32i8, [0] * 32)

    return I8x32(), codegen


@intrinsic
def lane64(typingctx, v, p):
    """64-bit lane p (0..3) of v: pair p's sign bits."""
    if not (v == I8x32 and isinstance(p, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        q = builder.bitcast(args[0], ir.VectorType(_i64, 4))
        return builder.extract_element(q, builder.trunc(args[1], _i32) if args[1].type.width > 32 else args[1])

    return types.int64(v, p), codegen


@intrinsic
def spread4_f32x16(typingctx, v, p):
    """Lanes 4p .. 4p + 3 of v, each four times: pair p's four half scales in its I32x16 dot's lane order."""
    if not (v == F32x16 and isinstance(p, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        p32 = builder.trunc(args[1], _i32) if args[1].type.width > 32 else args[1]
        v16 = ir.VectorType(_i32, 16)
        base = builder.shl(p32, ir.Constant(_i32, 2))
        splat = builder.shuffle_vector(builder.insert_element(ir.Constant(v16, ir.Undefined), base, ir.Constant(_i32, 0)),
                                       ir.Constant(v16, ir.Undefined), ir.Constant(v16, [0] * 16))  # fmt: skip
        idx = builder.add(splat, ir.Constant(v16, [j // 4 for j in range(16)]))
        if HAS_AVX512:
            return _call(builder, "llvm.x86.avx512.permvar.sf.512", _v16f32, [args[0], idx])
        out = ir.Constant(_v16f32, ir.Undefined)
        for k in range(4):
            x = builder.extract_element(args[0], builder.add(base, ir.Constant(_i32, k)))
            for j in range(4):
                out = builder.insert_element(out, x, ir.Constant(_i32, 4 * k + j))
        return out

    return F32x16(v, p), codegen


@intrinsic
def join_i8x64(typingctx, a, b):
    """I8x64 of a (bytes 0-31) and b (bytes 32-63): two sub-blocks side by side."""
    if not (a == I8x32 and b == I8x32):
        return None

    def codegen(context, builder, sig, args):
        return builder.shuffle_vector(args[0], args[1], _mask(range(64)))

    return I8x64(a, b), codegen


@intrinsic
def signs_i8x64(typingctx, x, bits):
    """x with lane j negated where bit j of the 64-bit word `bits` is set (|x| <= 127, so never wraps). The
    bits become a lane mask (`<64 x i1>`): with AVX-512 one kmov and a masked vpsubb."""
    if not (x == I8x64 and isinstance(bits, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        xv, b = args
        b64 = builder.zext(b, _i64) if b.type.width < 64 else b
        m = builder.bitcast(b64, ir.VectorType(ir.IntType(1), 64))
        return builder.select(m, builder.sub(ir.Constant(_v64i8, [0] * 64), xv), xv)

    return I8x64(x, bits), codegen


@intrinsic
def fma_i32x16(typingctx, acc, p, s):
    """acc + float(p) * s (F32x16)."""
    if not (acc == F32x16 and p == I32x16 and s == F32x16):
        return None

    def codegen(context, builder, sig, args):
        pf = builder.sitofp(args[1], _v16f32)
        return _call(builder, "llvm.fma.v16f32", _v16f32, [pf, args[2], args[0]])

    return F32x16(acc, p, s), codegen


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
