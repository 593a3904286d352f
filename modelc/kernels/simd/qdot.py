"""SIMD building blocks for the matmul kernels: numba vector types and llvmlite intrinsics.

Owns the int8 block dot (AVX2 `vpmaddubsw`/`vpmaddwd` with the sign trick, or
portable LLVM vector IR, chosen once at import from the host CPU features),
fp16/bf16 loads (`vcvtph2ps`) and a few float vector ops. No kernels here:
gemm_*.py builds them from these pieces. Values of the vector types live in
registers; they never cross a prange boundary or reach Python.

Lane layout of a 32-element int8 block dot: lane k of the I32x8 result is the
sum over elements 4k..4k+3, so lanes 0-3 cover elements 0-15 and lanes 4-7
cover 16-31 (what lets 16-element K-quant sub-blocks keep their own scale).

Over 500 lines on purpose: every intrinsic shares the vector types, the IR
helpers and the CPU-feature switch, and each is a few lines of IR.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, models, register_model

from modelc.kernels.runtime.cpu import HAS_AVX2, HAS_AVX512, HAS_VNNI  # noqa: F401  (re-exported: kernels read them here)


class VecType(types.Type):
    """An LLVM SIMD vector held in registers: `n` lanes of `elem`."""

    def __init__(self, elem: types.Type, n: int) -> None:
        self.elem = elem
        self.n = n
        super().__init__(name=f"vec{n}x{elem}")


I8x32 = VecType(types.int8, 32)
I32x8 = VecType(types.int32, 8)
F32x8 = VecType(types.float32, 8)

_LLVM_ELEM = {types.int8: ir.IntType(8), types.int32: ir.IntType(32), types.float32: ir.FloatType()}


@register_model(VecType)
class _VecModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type: VecType) -> None:
        super().__init__(dmm, fe_type, ir.VectorType(_LLVM_ELEM[fe_type.elem], fe_type.n))


_i8, _i16, _i32, _f32, _half = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.FloatType(), ir.HalfType()
_v32i8, _v16i16, _v8i32, _v8f32 = (
    ir.VectorType(_i8, 32),
    ir.VectorType(_i16, 16),
    ir.VectorType(_i32, 8),
    ir.VectorType(_f32, 8),
)


def _ptr_at(context, builder, aryty, ary, idx, elem_llty):
    """Pointer to ary[idx] (1-D C-contiguous array) cast to elem_llty*."""
    arr = context.make_array(aryty)(context, builder, ary)
    base = builder.gep(arr.data, [idx])
    return builder.bitcast(base, elem_llty.as_pointer())


def _call(builder, name, ret, args):
    fnty = ir.FunctionType(ret, [a.type for a in args])
    fn = cgutils.get_or_insert_function(builder.module, fnty, name)
    return builder.call(fn, args)


def _check_1d(ary) -> bool:
    return isinstance(ary, types.Array) and ary.ndim == 1 and ary.layout == "C"


# ---- scalar fp16 / bf16 -------------------------------------------------------


@intrinsic
def f16_at(typingctx, ary, idx):
    """float32 from the little-endian fp16 at byte ary[idx] (uint8 1-D C array, any alignment)."""
    if not (_check_1d(ary) and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        p = _ptr_at(context, builder, sig.args[0], args[0], args[1], _i16)
        h = builder.load(p, align=1)
        return builder.fpext(builder.bitcast(h, _half), _f32)

    return types.float32(ary, idx), codegen


@intrinsic
def bf16_at(typingctx, ary, idx):
    """float32 from the little-endian bf16 at byte ary[idx] (uint8 1-D C array)."""
    if not (_check_1d(ary) and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        p = _ptr_at(context, builder, sig.args[0], args[0], args[1], _i16)
        w = builder.shl(builder.zext(builder.load(p, align=1), _i32), ir.Constant(_i32, 16))
        return builder.bitcast(w, _f32)

    return types.float32(ary, idx), codegen


@intrinsic
def f32_at(typingctx, ary, idx):
    """float32 at byte ary[idx] of a uint8 1-D C array (any alignment)."""
    if not (_check_1d(ary) and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        p = _ptr_at(context, builder, sig.args[0], args[0], args[1], _f32)
        return builder.load(p, align=1)

    return types.float32(ary, idx), codegen


# ---- vector loads ---------------------------------------------------------------


@intrinsic
def load_i8x32(typingctx, ary, idx):
    """32 int8 starting at element idx of a 1-D C int8/uint8 array (unaligned load)."""
    if not (_check_1d(ary) and ary.dtype in (types.int8, types.uint8) and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        p = _ptr_at(context, builder, sig.args[0], args[0], args[1], _v32i8)
        return builder.load(p, align=1)

    return I8x32(ary, idx), codegen


# ---- the int8 block dot -----------------------------------------------------------


def _dot_avx2(builder, w, a):
    # vpmaddubsw wants unsigned x signed: |w| x (a * sign(w)); |w| <= 128, |a| <= 127 so
    # the i16 pair sums (<= 32512) never saturate.
    aw = _call(builder, "llvm.abs.v32i8", _v32i8, [w, ir.Constant(ir.IntType(1), 0)])
    sa = _call(builder, "llvm.x86.avx2.psign.b", _v32i8, [a, w])
    return _dot_u_avx2(builder, aw, sa)


def dot4_generic(builder, u, a, *, signed: bool):
    """Portable LLVM vector IR for the int8 block dot: <n x i8> u . <n x i8> a -> <n/4 x i32>, lane k =
    bytes 4k..4k+3 (u signed or unsigned, a signed), exact in int32. Every qdot* module's fallback."""
    n = u.type.count
    vn = ir.VectorType(_i32, n)
    p = builder.mul(builder.sext(u, vn) if signed else builder.zext(u, vn), builder.sext(a, vn))
    for m in (n // 2, n // 4):
        even = builder.shuffle_vector(p, p, ir.Constant(ir.VectorType(_i32, m), list(range(0, 2 * m, 2))))
        odd = builder.shuffle_vector(p, p, ir.Constant(ir.VectorType(_i32, m), list(range(1, 2 * m, 2))))
        p = builder.add(even, odd)
    return p


@intrinsic
def dot_i8x32(typingctx, w, a):
    """Signed int8 x int8 block dot -> I32x8 partial sums (lane k = elements 4k..4k+3)."""
    if not (w == I8x32 and a == I8x32):
        return None

    def codegen(context, builder, sig, args):
        if HAS_AVX2:
            return _dot_avx2(builder, args[0], args[1])
        return dot4_generic(builder, args[0], args[1], signed=True)

    return I32x8(w, a), codegen


def _dot_u_avx2(builder, u, a):
    # u in 0..63 (<= 6-bit weights), so the i16 pair sums (<= 16002) never saturate;
    # vpdpbusd sums the same 4 products per lane in one instruction, exactly.
    if HAS_VNNI:
        zero = ir.Constant(_v8i32, [0] * 8)
        args = [zero, builder.bitcast(u, _v8i32), builder.bitcast(a, _v8i32)]
        return _call(builder, "llvm.x86.avx512.vpdpbusd.256", _v8i32, args)
    p16 = _call(builder, "llvm.x86.avx2.pmadd.ub.sw", _v16i16, [u, a])
    ones = ir.Constant(_v16i16, [1] * 16)
    return _call(builder, "llvm.x86.avx2.pmadd.wd", _v8i32, [p16, ones])


@intrinsic
def dotu_i8x32(typingctx, u, a):
    """Unsigned (0..63) x signed int8 block dot -> I32x8 (lane k = elements 4k..4k+3)."""
    if not (u == I8x32 and a == I8x32):
        return None

    def codegen(context, builder, sig, args):
        if HAS_AVX2:
            return _dot_u_avx2(builder, args[0], args[1])
        return dot4_generic(builder, args[0], args[1], signed=False)

    return I32x8(u, a), codegen


@intrinsic
def load_i8_f32x8(typingctx, ary, idx):
    """8 int8 at ary[idx] (1-D C int8 array) converted to float32."""
    if not (_check_1d(ary) and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        p = _ptr_at(context, builder, sig.args[0], args[0], args[1], ir.VectorType(_i8, 8))
        return builder.sitofp(builder.load(p, align=1), _v8f32)

    return F32x8(ary, idx), codegen


# ---- float vector ops ---------------------------------------------------------------


@intrinsic
def halves_f32x8(typingctx, lo, hi):
    """[lo]*4 + [hi]*4: one scale per 16-element half of a block dot."""
    if lo != types.float32 or hi != types.float32:
        return None

    def codegen(context, builder, sig, args):
        v = ir.Constant(_v8f32, ir.Undefined)
        v = builder.insert_element(v, args[0], ir.Constant(_i32, 0))
        v = builder.insert_element(v, args[1], ir.Constant(_i32, 1))
        return builder.shuffle_vector(v, v, ir.Constant(_v8i32, [0, 0, 0, 0, 1, 1, 1, 1]))

    return F32x8(lo, hi), codegen


@intrinsic
def fma_i32x8(typingctx, acc, p, s):
    """acc + float(p) * s, with p the I32x8 of a block dot and s an F32x8 of scales."""
    if not (acc == F32x8 and p == I32x8 and s == F32x8):
        return None

    def codegen(context, builder, sig, args):
        pf = builder.sitofp(args[1], _v8f32)
        return _call(builder, "llvm.fma.v8f32", _v8f32, [pf, args[2], args[0]])

    return F32x8(acc, p, s), codegen


# ---- int8 block unpacking (weights -> 32 signed int8 per block) ---------------------


@intrinsic
def store_i8x32(typingctx, ary, idx, v):
    """ary[idx:idx+32] = v for a 1-D C int8 array."""
    if not (_check_1d(ary) and ary.dtype == types.int8 and v == I8x32):
        return None

    def codegen(context, builder, sig, args):
        p = _ptr_at(context, builder, sig.args[0], args[0], args[1], _v32i8)
        builder.store(args[2], p, align=1)
        return context.get_dummy_value()

    return types.none(ary, idx, v), codegen


def _splat_i8(builder, k):
    k8 = builder.trunc(k, _i8) if k.type.width > 8 else k
    v = builder.insert_element(ir.Constant(_v32i8, ir.Undefined), k8, ir.Constant(_i32, 0))
    return builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(_i32, 32), [0] * 32))


@intrinsic
def bits_i8x32(typingctx, ary, idx, shift, mask):
    """(ary[idx:idx+32] >> shift) & mask as unsigned bytes (uint8 1-D C array)."""
    if not (_check_1d(ary) and isinstance(shift, types.Integer) and isinstance(mask, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        p = _ptr_at(context, builder, sig.args[0], args[0], args[1], _v32i8)
        v = builder.lshr(builder.load(p, align=1), _splat_i8(builder, args[2]))
        return builder.and_(v, _splat_i8(builder, args[3]))

    return I8x32(ary, idx, shift, mask), codegen


@intrinsic
def nib16_i8x32(typingctx, ary, idx):
    """The 32 nibbles of 16 bytes ary[idx:idx+16]: low nibbles are lanes 0-15, high 16-31 (Q4_0 order)."""
    if not (_check_1d(ary) and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        v16 = ir.VectorType(_i8, 16)
        p = _ptr_at(context, builder, sig.args[0], args[0], args[1], v16)
        v = builder.load(p, align=1)
        lo = builder.and_(v, ir.Constant(v16, [15] * 16))
        hi = builder.lshr(v, ir.Constant(v16, [4] * 16))
        return builder.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(_i32, 32), list(range(32))))

    return I8x32(ary, idx), codegen


@intrinsic
def bits32_i8x32(typingctx, ary, idx, shift):
    """Lane j = ((u32 at byte idx) >> j & 1) << shift: Q5_0/Q5_1's fifth bits."""
    if not (_check_1d(ary) and isinstance(idx, types.Integer) and isinstance(shift, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        v32i32 = ir.VectorType(_i32, 32)
        p = _ptr_at(context, builder, sig.args[0], args[0], args[1], _i32)
        w = builder.load(p, align=1)
        v = builder.insert_element(ir.Constant(v32i32, ir.Undefined), w, ir.Constant(_i32, 0))
        v = builder.shuffle_vector(v, v, ir.Constant(v32i32, [0] * 32))
        v = builder.and_(builder.lshr(v, ir.Constant(v32i32, list(range(32)))), ir.Constant(v32i32, [1] * 32))
        return builder.shl(builder.trunc(v, _v32i8), _splat_i8(builder, args[2]))

    return I8x32(ary, idx, shift), codegen


@intrinsic
def or_i8x32(typingctx, a, b):
    if not (a == I8x32 and b == I8x32):
        return None

    def codegen(context, builder, sig, args):
        return builder.or_(args[0], args[1])

    return I8x32(a, b), codegen


@intrinsic
def shl_i8x32(typingctx, a, k):
    """a << k per byte."""
    if not (a == I8x32 and isinstance(k, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        return builder.shl(args[0], _splat_i8(builder, args[1]))

    return I8x32(a, k), codegen


@intrinsic
def addk_i8x32(typingctx, a, k):
    """a + k per byte (wrapping), k an integer (e.g. -8 to centre Q4_0's nibbles)."""
    if not (a == I8x32 and isinstance(k, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        return builder.add(args[0], _splat_i8(builder, args[1]))

    return I8x32(a, k), codegen


@intrinsic
def abs_i8x32(typingctx, v):
    """|v| per byte (|-128| wraps to 128 as an unsigned byte, as vpmaddubsw wants)."""
    if v != I8x32:
        return None

    def codegen(context, builder, sig, args):
        return _call(builder, "llvm.abs.v32i8", _v32i8, [args[0], ir.Constant(ir.IntType(1), 0)])

    return I8x32(v), codegen


@intrinsic
def sign_i8x32(typingctx, a, s):
    """a * sign(s) per byte (vpsignb): pairs with abs_i8x32(s) for a signed dot via dotu_i8x32."""
    if not (a == I8x32 and s == I8x32):
        return None

    def codegen(context, builder, sig, args):
        a_, s_ = args
        if HAS_AVX2:
            return _call(builder, "llvm.x86.avx2.psign.b", _v32i8, [a_, s_])
        zero = ir.Constant(_v32i8, [0] * 32)
        neg = builder.select(builder.icmp_signed("<", s_, zero), builder.sub(zero, a_), a_)
        return builder.select(builder.icmp_signed("==", s_, zero), zero, neg)

    return I8x32(a, s), codegen


# ---- activation quantization (Q8_0-style blocks of 32) --------------------------------


def _load4_f32x8(context, builder, aryty, ary, idx):
    out = []
    for k in range(4):
        i = builder.add(idx, ir.Constant(idx.type, 8 * k))
        out.append(builder.load(_ptr_at(context, builder, aryty, ary, i, _v8f32), align=4))
    return out


def _reduce8(builder, v, name):
    """Reduce an <8 x float> with llvm.NAME.v4f32 / f32 pairwise (maxnum or similar)."""
    v4 = ir.VectorType(_f32, 4)
    lo = builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(_i32, 4), [0, 1, 2, 3]))
    hi = builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(_i32, 4), [4, 5, 6, 7]))
    m = _call(builder, f"llvm.{name}.v4f32", v4, [lo, hi])
    m2 = builder.shuffle_vector(m, m, ir.Constant(ir.VectorType(_i32, 4), [2, 3, 0, 1]))
    m = _call(builder, f"llvm.{name}.v4f32", v4, [m, m2])
    a = builder.extract_element(m, ir.Constant(_i32, 0))
    b = builder.extract_element(m, ir.Constant(_i32, 1))
    return _call(builder, f"llvm.{name}.f32", _f32, [a, b])


@intrinsic
def amax32(typingctx, x, xo):
    """max |x[xo:xo+32]| for a 1-D C float32 array (finite values)."""
    if not (_check_1d(x) and x.dtype == types.float32 and isinstance(xo, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        vs = _load4_f32x8(context, builder, sig.args[0], args[0], args[1])
        vs = [_call(builder, "llvm.fabs.v8f32", _v8f32, [v]) for v in vs]
        m01 = _call(builder, "llvm.maxnum.v8f32", _v8f32, [vs[0], vs[1]])
        m23 = _call(builder, "llvm.maxnum.v8f32", _v8f32, [vs[2], vs[3]])
        return _reduce8(builder, _call(builder, "llvm.maxnum.v8f32", _v8f32, [m01, m23]), "maxnum")

    return types.float32(x, xo), codegen


@intrinsic
def quantize32(typingctx, x, xo, q, qo, inv):
    """q[qo:qo+32] = int8(trunc(v + copysign(0.5, v))), v = x[xo:xo+32] * inv (float32).

    Returns (sum of the first 16 codes, sum of the last 16) as int32.
    """
    ok = _check_1d(x) and x.dtype == types.float32 and _check_1d(q) and q.dtype == types.int8
    if not (ok and inv == types.float32):
        return None
    ret = types.UniTuple(types.int32, 2)

    def codegen(context, builder, sig, args):
        xv = _load4_f32x8(context, builder, sig.args[0], args[0], args[1])
        s = builder.insert_element(ir.Constant(_v8f32, ir.Undefined), args[4], ir.Constant(_i32, 0))
        s = builder.shuffle_vector(s, s, ir.Constant(_v8i32, [0] * 8))
        half = ir.Constant(_v8f32, [0.5] * 8)
        ints = []
        for v in xv:
            v = builder.fmul(v, s)
            r = builder.fadd(v, _call(builder, "llvm.copysign.v8f32", _v8f32, [half, v]))
            ints.append(builder.fptosi(r, _v8i32))
        v16 = ir.VectorType(_i32, 16)
        lo = builder.shuffle_vector(ints[0], ints[1], ir.Constant(v16, list(range(16))))
        hi = builder.shuffle_vector(ints[2], ints[3], ir.Constant(v16, list(range(16))))
        allv = builder.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(_i32, 32), list(range(32))))
        p = _ptr_at(context, builder, sig.args[2], args[2], args[3], _v32i8)
        builder.store(builder.trunc(allv, _v32i8), p, align=1)
        s0 = _call(builder, "llvm.vector.reduce.add.v16i32", _i32, [lo])
        s1 = _call(builder, "llvm.vector.reduce.add.v16i32", _i32, [hi])
        return context.make_tuple(builder, ret, [s0, s1])

    return ret(x, xo, q, qo, inv), codegen


# ---- 512-bit pieces (AVX-512 VNNI/VBMI on x86; generic LLVM vector IR elsewhere) -------------


F32x16 = VecType(types.float32, 16)

_v64i8, _v32i16, _v16i32, _v16f32 = (
    ir.VectorType(_i8, 64),
    ir.VectorType(_i16, 32),
    ir.VectorType(_i32, 16),
    ir.VectorType(_f32, 16),
)


# ---- float vector ops, 8 and 16 lanes: one factory ------------------------------------------


def _float_ops(vt: VecType) -> tuple:
    """The float32 intrinsics for the n-lane vector type vt (F32x8 or F32x16), named as the module-level names they are assigned to:
    zeros, splat, load, store, load_f16, load_bf16 (idx in the array's element units, bytes for uint8),
    fma (acc + a * b), add, mul, hsum (pairwise halving: lane sums in a fixed order)."""
    n = vt.n
    vf, vi = ir.VectorType(_f32, n), ir.VectorType(_i32, n)

    def named(name: str, doc: str):  # name: "zeros_f32x" -> zeros_f32x8 ...; "load_f16x" -> load_f16x8
        def deco(fn):
            fn.__name__ = fn.__qualname__ = f"{name}{n}"
            fn.__doc__ = doc
            return intrinsic(fn)

        return deco

    def is_f32(ary) -> bool:
        return _check_1d(ary) and ary.dtype == types.float32

    @named("zeros_f32x", f"{n} float32 zeros.")
    def zeros(typingctx):
        def codegen(context, builder, sig, args):
            return ir.Constant(vf, [0.0] * n)

        return vt(), codegen

    @named("splat_f32x", f"{n} copies of a float32.")
    def splat(typingctx, s):
        if s != types.float32:
            return None

        def codegen(context, builder, sig, args):
            v = builder.insert_element(ir.Constant(vf, ir.Undefined), args[0], ir.Constant(_i32, 0))
            return builder.shuffle_vector(v, v, ir.Constant(vi, [0] * n))

        return vt(s), codegen

    @named("load_f32x", f"{n} float32 starting at element idx of a 1-D C float32 array.")
    def load(typingctx, ary, idx):
        if not (is_f32(ary) and isinstance(idx, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            return builder.load(_ptr_at(context, builder, sig.args[0], args[0], args[1], vf), align=4)

        return vt(ary, idx), codegen

    @named("store_f32x", f"ary[idx:idx+{n}] = v for a 1-D C float32 array.")
    def store(typingctx, ary, idx, v):
        if not (is_f32(ary) and v == vt):
            return None

        def codegen(context, builder, sig, args):
            builder.store(args[2], _ptr_at(context, builder, sig.args[0], args[0], args[1], vf), align=4)
            return context.get_dummy_value()

        return types.none(ary, idx, v), codegen

    @named("load_f16x", f"{n} fp16 -> float32 at ary[idx] (vcvtph2ps).")
    def load_f16(typingctx, ary, idx):
        if not (_check_1d(ary) and isinstance(idx, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            p = _ptr_at(context, builder, sig.args[0], args[0], args[1], ir.VectorType(_half, n))
            return builder.fpext(builder.load(p, align=1), vf)

        return vt(ary, idx), codegen

    @named("load_bf16x", f"{n} bf16 -> float32 at ary[idx] (a 16-bit shift).")
    def load_bf16(typingctx, ary, idx):
        if not (_check_1d(ary) and isinstance(idx, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            p = _ptr_at(context, builder, sig.args[0], args[0], args[1], ir.VectorType(_i16, n))
            w = builder.shl(builder.zext(builder.load(p, align=1), vi), ir.Constant(vi, [16] * n))
            return builder.bitcast(w, vf)

        return vt(ary, idx), codegen

    @named("fma_f32x", f"acc + a * b on F32x{n}.")
    def fma(typingctx, acc, a, b):
        if not (acc == vt and a == vt and b == vt):
            return None

        def codegen(context, builder, sig, args):
            return _call(builder, f"llvm.fma.v{n}f32", vf, [args[1], args[2], args[0]])

        return vt(acc, a, b), codegen

    @named("add_f32x", f"a + b on F32x{n}.")
    def add(typingctx, a, b):
        if not (a == vt and b == vt):
            return None

        def codegen(context, builder, sig, args):
            return builder.fadd(args[0], args[1])

        return vt(a, b), codegen

    @named("mul_f32x", f"a * b on F32x{n}.")
    def mul(typingctx, a, b):
        if not (a == vt and b == vt):
            return None

        def codegen(context, builder, sig, args):
            return builder.fmul(args[0], args[1])

        return vt(a, b), codegen

    @named("hsum_f32x", f"Sum of the {n} lanes as float32 (pairwise halving).")
    def hsum(typingctx, v):
        if v != vt:
            return None

        def codegen(context, builder, sig, args):
            x, m = args[0], n
            while m > 1:
                m //= 2
                lo = builder.shuffle_vector(x, x, ir.Constant(ir.VectorType(_i32, m), list(range(m))))
                hi = builder.shuffle_vector(x, x, ir.Constant(ir.VectorType(_i32, m), list(range(m, 2 * m))))
                x = builder.fadd(lo, hi)
            return builder.extract_element(x, ir.Constant(_i32, 0))

        return types.float32(v), codegen

    return zeros, splat, load, store, load_f16, load_bf16, fma, add, mul, hsum


(zeros_f32x8, splat_f32x8, load_f32x8, store_f32x8, load_f16x8, load_bf16x8,
 fma_f32x8, add_f32x8, mul_f32x8, hsum_f32x8) = _float_ops(F32x8)  # fmt: skip
(zeros_f32x16, splat_f32x16, load_f32x16, store_f32x16, load_f16x16, load_bf16x16,
 fma_f32x16, add_f32x16, mul_f32x16, hsum_f32x16) = _float_ops(F32x16)  # fmt: skip


def _load(context, builder, aryty, ary, idx, llty, off=0):
    i = builder.add(idx, ir.Constant(idx.type, off)) if off else idx
    return builder.load(_ptr_at(context, builder, aryty, ary, i, llty), align=1)


def _dpbusd16(builder, acc, u, a):
    """acc (16 x i32) + per-lane sums of 4 products u (unsigned bytes) x a (signed bytes)."""
    if HAS_AVX512:
        args = [acc, builder.bitcast(u, _v16i32), builder.bitcast(a, _v16i32)]
        return _call(builder, "llvm.x86.avx512.vpdpbusd.512", _v16i32, args)
    return builder.add(acc, dot4_generic(builder, u, a, signed=False))


def _half_lanes(builder, words, picks):
    """float32 x16 from fp16 words: lane l = words[picks[l]] (words a <32 x i16> or wider)."""
    h = builder.shuffle_vector(words, words, ir.Constant(_v16i32, picks))
    return builder.fpext(builder.bitcast(h, ir.VectorType(_half, 16)), _v16f32)


Q4_0X4_ACT_BYTES = 256
"""Bytes of prepared activation per group of 4 Q4_0 blocks (q4_0x4_fma's `xa` layout)."""

Q8_0X2_ACT_BYTES = 192
"""Bytes of prepared activation per group of 2 Q8_0 blocks (q8_0x2_fma's `xa` layout)."""


@intrinsic
def q4_0x4_fma(typingctx, acc, w, o, xa, ao):
    """acc + the 4 Q4_0 blocks at bytes w[o:o+72] dotted with a prepared activation group, as F32x16.

    xa[ao:ao+256] (uint8 1-D) holds, for blocks j = 0..3 of the group: [0:64] the int8 codes
    of elements 0..15 of block j at 16j, [64:128] those of elements 16..31, [128:192] 16 int32
    corrections (lane 4j+k: -8 x the codes of elements 4k..4k+3 and 16+4k..16+4k+3 of block
    j: the nibble offset, exact), [192:256] 16 float32 activation scales (lane 4j+k: block j's).
    Lane 4j+k of the result adds d_j * xd_j * (sum over those 8 elements of (nibble - 8) * code).
    Reads exactly the 72 weight bytes (64 + 16 bytes; one two-source permute gathers the codes).
    Fastest with xa 64-byte aligned (every activation load then stays within one cache line).
    """
    ok = _check_1d(w) and _check_1d(xa) and isinstance(o, types.Integer) and isinstance(ao, types.Integer)
    if not (ok and acc == F32x16):
        return None

    def codegen(context, builder, sig, args):
        acc_, w_, o_, xa_, ao_ = args
        wt, xt = sig.args[1], sig.args[3]
        a = _load(context, builder, wt, w_, o_, _v64i8)  # blocks 0-2 and the scale of block 3
        t = _load(context, builder, wt, w_, o_, ir.VectorType(_i8, 16), 56)  # block 3's codes
        b = builder.shuffle_vector(t, t, ir.Constant(ir.VectorType(_i32, 64), list(range(16)) * 4))
        pick = [18 * j + 2 + i if j < 3 else 64 + i for j in range(4) for i in range(16)]
        qs = builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(_i32, 64), pick))
        m15 = ir.Constant(_v64i8, [15] * 64)
        lo = builder.and_(qs, m15)
        hi = builder.and_(builder.lshr(qs, ir.Constant(_v64i8, [4] * 64)), m15)
        xl = _load(context, builder, xt, xa_, ao_, _v64i8)
        xh = _load(context, builder, xt, xa_, ao_, _v64i8, 64)
        corr = _load(context, builder, xt, xa_, ao_, _v16i32, 128)
        xd = _load(context, builder, xt, xa_, ao_, _v16f32, 192)
        p = _dpbusd16(builder, _dpbusd16(builder, corr, lo, xl), hi, xh)
        d = _half_lanes(builder, builder.bitcast(a, _v32i16), [9 * j for j in range(4) for _ in range(4)])
        s = builder.fmul(d, xd)
        return _call(builder, "llvm.fma.v16f32", _v16f32, [builder.sitofp(p, _v16f32), s, acc_])

    return F32x16(acc, w, o, xa, ao), codegen


@intrinsic
def q8_0x2_fma(typingctx, acc, w, o, xa, ao):
    """acc + the 2 Q8_0 blocks at bytes w[o:o+68] dotted with a prepared activation group, as F32x16.

    xa[ao:ao+192] (uint8 1-D): [0:64] the int8 codes of the 2 blocks in order, [64:128] 16
    int32 corrections (lane l: -128 x the codes of elements 4l..4l+3: vpdpbusd multiplies
    unsigned bytes, so the signed weights go in as w + 128 = w ^ 0x80, exact), [128:192] 16
    float32 activation scales (lanes 0-7 block 0's, 8-15 block 1's).
    """
    ok = _check_1d(w) and _check_1d(xa) and isinstance(o, types.Integer) and isinstance(ao, types.Integer)
    if not (ok and acc == F32x16):
        return None

    def codegen(context, builder, sig, args):
        acc_, w_, o_, xa_, ao_ = args
        wt, xt = sig.args[1], sig.args[3]
        q0 = _load(context, builder, wt, w_, o_, _v32i8, 2)
        q1 = _load(context, builder, wt, w_, o_, _v32i8, 36)
        qs = builder.shuffle_vector(q0, q1, ir.Constant(ir.VectorType(_i32, 64), list(range(64))))
        u = builder.xor(qs, ir.Constant(_v64i8, [-128] * 64))
        x = _load(context, builder, xt, xa_, ao_, _v64i8)
        corr = _load(context, builder, xt, xa_, ao_, _v16i32, 64)
        xd = _load(context, builder, xt, xa_, ao_, _v16f32, 128)
        p = _dpbusd16(builder, corr, u, x)
        h0 = _load(context, builder, wt, w_, o_, _i16)
        h1 = _load(context, builder, wt, w_, o_, _i16, 34)
        hv = builder.insert_element(ir.Constant(ir.VectorType(_i16, 2), ir.Undefined), h0, ir.Constant(_i32, 0))
        hv = builder.insert_element(hv, h1, ir.Constant(_i32, 1))
        d = _half_lanes(builder, hv, [0] * 8 + [1] * 8)
        s = builder.fmul(d, xd)
        return _call(builder, "llvm.fma.v16f32", _v16f32, [builder.sitofp(p, _v16f32), s, acc_])

    return F32x16(acc, w, o, xa, ao), codegen


def _prefetch(locality: int, doc: str):
    """A software prefetch intrinsic (ary, idx) with LLVM's locality hint (3: prefetcht0, 2: prefetcht1)."""

    def pf(typingctx, ary, idx):
        if not (_check_1d(ary) and isinstance(idx, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            p = _ptr_at(context, builder, sig.args[0], args[0], args[1], _i8)
            i32 = ir.IntType(32)
            ptrty = ir.IntType(8).as_pointer()
            fnty = ir.FunctionType(ir.VoidType(), [ptrty, i32, i32, i32])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
            builder.call(fn, [p, ir.Constant(i32, 0), ir.Constant(i32, locality), ir.Constant(i32, 1)])
            return context.get_dummy_value()

        return types.none(ary, idx), codegen

    pf.__name__ = pf.__qualname__ = "prefetch" if locality == 3 else f"prefetch_l{4 - locality}"
    pf.__doc__ = doc
    return intrinsic(pf)


prefetch = _prefetch(
    3,
    "Software prefetch of the cache line holding ary[idx] into all cache levels (a hint: never faults, so idx may run "
    "past the end of the array).",
)
prefetch_l2 = _prefetch(2, "prefetch into L2 (prefetcht1): cpu.PREFETCH_L2.")
