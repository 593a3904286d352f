"""Whole-super-block K-quant dots for the T=1 matvec (gemm_fused_k): llvmlite intrinsics.

Each intrinsic folds one 256-element super-block of a Q4_K / Q5_K / Q6_K weight
row, dotted with the int8 activations of quant.quantize_act, into a 16-lane
float accumulator (F32x16). Everything per super-block is vector code: the
twelve 6-bit scale/min bytes of Q4_K/Q5_K are decoded with a few 32-bit
integer ops into 8 scales and 8 mins at once, the per-chunk float factors
(super-block scale x sub-block scale x activation scale) are one 8-lane
multiply, and the mins are one 8-lane dot with the per-32 activation sums.
Chunks are dotted in pairs: lanes 0-7 of a pair's product hold the first
chunk's partial sums, lanes 8-15 the second's (16-element Q6_K sub-blocks:
4 lanes each), so one permute gives each lane its factor.

Instruction sets, chosen once at import: AVX512-VNNI (+BW, VL) dots a pair of
chunks with one 512-bit vpdpbusd (MODELC_NO_AVX512=1 turns it off); else the
256-bit dot of qdot (AVX-VNNI vpdpbusd, AVX2 vpmaddubsw+vpmaddwd, honouring
MODELC_NO_VNNI / MODELC_NO_AVX2); else portable LLVM vector IR. Unsigned codes
(0..63) times signed activations: the dots are exact in int32.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from modelc.kernels.runtime.cpu import HAS_AVX2, HAS_AVX512_VNNI, HAS_VNNI
from modelc.kernels.simd.qdot import F32x16, dot4_generic

_i1, _i8, _i16, _i32, _f32, _half = (
    ir.IntType(1),
    ir.IntType(8),
    ir.IntType(16),
    ir.IntType(32),
    ir.FloatType(),
    ir.HalfType(),
)


def _vec(elem, n):
    return ir.VectorType(elem, n)


def _splat(elem, n, value):
    return ir.Constant(_vec(elem, n), [value] * n)


def _call(builder, name, ret, args):
    fnty = ir.FunctionType(ret, [a.type for a in args])
    return builder.call(cgutils.get_or_insert_function(builder.module, fnty, name), args)


def _bcast(builder, s, n):
    """n copies of the scalar float s."""
    v = builder.insert_element(ir.Constant(_vec(_f32, n), ir.Undefined), s, _i32(0))
    return _shuffle(builder, v, v, [0] * n)


def _shuffle(builder, a, b, idx):
    return builder.shuffle_vector(a, b, ir.Constant(_vec(_i32, len(idx)), list(idx)))


class _Args:
    """Typed access to a 1-D C array argument: element pointers and vector loads."""

    def __init__(self, context, builder, aryty, ary) -> None:
        self.builder = builder
        self.data = context.make_array(aryty)(context, builder, ary).data

    def load(self, idx, llty, align=1):
        p = self.builder.gep(self.data, [idx])
        return self.builder.load(self.builder.bitcast(p, llty.as_pointer()), align=align)


def _off(builder, base, k):
    return builder.add(base, ir.Constant(base.type, k)) if k else base


def _is_1d(ary, dtypes) -> bool:
    return isinstance(ary, types.Array) and ary.ndim == 1 and ary.layout == "C" and ary.dtype in dtypes


# ---- the int8 dot of unsigned codes x signed activations ------------------------------


def _dotu(builder, u, a):
    """<n x i8> u (0..63) . <n x i8> a -> <n/4 x i32>, lane k = bytes 4k..4k+3 (n = 32 or 64)."""
    n = u.type.count
    vi32 = _vec(_i32, n // 4)
    if n == 64 and HAS_AVX512_VNNI:
        args = [ir.Constant(vi32, [0] * 16), builder.bitcast(u, vi32), builder.bitcast(a, vi32)]
        return _call(builder, "llvm.x86.avx512.vpdpbusd.512", vi32, args)
    if n == 64:
        lo = _dotu(builder, _shuffle(builder, u, u, range(32)), _shuffle(builder, a, a, range(32)))
        hi = _dotu(builder, _shuffle(builder, u, u, range(32, 64)), _shuffle(builder, a, a, range(32, 64)))
        return _shuffle(builder, lo, hi, range(16))
    if HAS_VNNI:
        args = [ir.Constant(vi32, [0] * 8), builder.bitcast(u, vi32), builder.bitcast(a, vi32)]
        return _call(builder, "llvm.x86.avx512.vpdpbusd.256", vi32, args)
    if HAS_AVX2:
        p16 = _call(builder, "llvm.x86.avx2.pmadd.ub.sw", _vec(_i16, 16), [u, a])
        return _call(builder, "llvm.x86.avx2.pmadd.wd", vi32, [p16, _splat(_i16, 16, 1)])
    return dot4_generic(builder, u, a, signed=False)


def _pair_fma(builder, acc, u0, u1, xq, xo, fac):
    """acc + float(dot(u0|u1, xq[xo:xo+64])) * fac: one pair of chunks, fac per lane (F32x16)."""
    u = _shuffle(builder, u0, u1, range(64))
    a = xq.load(xo, _vec(_i8, 64))
    p = builder.sitofp(_dotu(builder, u, a), _vec(_f32, 16))
    return _call(builder, "llvm.fma.v16f32", _vec(_f32, 16), [p, fac, acc])


# ---- Q4_K / Q5_K --------------------------------------------------------------------------


def _scales_mins_q45k(builder, w, o):
    """The 8 scales and 8 mins (6-bit, as float32 <8 x float>) of the super-block at byte o."""
    # the 12 bytes as u32 words a (bytes 0-3), m (4-7), md (8-11); per byte j < 4:
    #   scale j = a & 63, scale j+4 = (md & 15) | (a >> 6) << 4,
    #   min j   = m & 63, min j+4   = (md >> 4) | (m >> 6) << 4;
    # all four words at once: [a, md, m, md] >> [0, 0, 0, 4] & [63, 15, 63, 15] | ([a, a, m, m] >> 2) & [0, 48, 0, 48]
    v4 = _vec(_i32, 4)
    v = w.load(_off(builder, o, 4), v4)  # the 4th word is the block's next field, unused
    amm = _shuffle(builder, v, v, [0, 2, 1, 2])
    aamm = _shuffle(builder, v, v, [0, 0, 1, 1])
    lo = builder.and_(builder.lshr(amm, ir.Constant(v4, [0, 0, 0, 4])), ir.Constant(v4, [0x3F3F3F3F, 0x0F0F0F0F] * 2))
    hi = builder.and_(builder.lshr(aamm, ir.Constant(v4, [2] * 4)), ir.Constant(v4, [0, 0x30303030] * 2))
    f = builder.uitofp(builder.bitcast(builder.or_(lo, hi), _vec(_i8, 16)), _vec(_f32, 16))
    return _shuffle(builder, f, f, range(8)), _shuffle(builder, f, f, range(8, 16))


def _q45k_block(context, builder, sig, args, five):
    acc, wa, o, xqa, xda, xma, xo = args
    w = _Args(context, builder, sig.args[1], wa)
    xq = _Args(context, builder, sig.args[3], xqa)
    xd = _Args(context, builder, sig.args[4], xda)
    xm = _Args(context, builder, sig.args[5], xma)
    v8f = _vec(_f32, 8)
    d = builder.fpext(w.load(o, _half), _f32)
    dmin = builder.fpext(w.load(_off(builder, o, 2), _half), _f32)
    sc, mn = _scales_mins_q45k(builder, w, o)
    xc = builder.lshr(xo, ir.Constant(xo.type, 5))  # chunk index of the super-block's first chunk
    dv = _bcast(builder, d, 8)
    fac = builder.fmul(builder.fmul(sc, dv), xd.load(xc, v8f, 4))  # per chunk: d * scale * xd
    mv = builder.fmul(mn, xm.load(xc, v8f, 4))  # per chunk: min * activation sum
    mv = builder.fmul(mv, _bcast(builder, dmin, 8))
    acc = builder.fsub(acc, _shuffle(builder, mv, ir.Constant(v8f, [0.0] * 8), range(16)))
    qs = 48 if five else 16
    v32 = _vec(_i8, 32)
    qh = w.load(_off(builder, o, 16), v32) if five else None
    for j in range(4):
        q = w.load(_off(builder, o, qs + 32 * j), v32)
        u0 = builder.and_(q, _splat(_i8, 32, 15))
        u1 = builder.lshr(q, _splat(_i8, 32, 4))
        if five:  # bit c of qh[l] is the fifth bit of chunk c
            u0 = builder.or_(u0, _fifth(builder, qh, 2 * j))
            u1 = builder.or_(u1, _fifth(builder, qh, 2 * j + 1))
        f = _shuffle(builder, fac, fac, [2 * j] * 8 + [2 * j + 1] * 8)
        acc = _pair_fma(builder, acc, u0, u1, xq, _off(builder, xo, 64 * j), f)
    return acc


def _fifth(builder, qh, c):
    """16 where bit c of each qh byte is set, else 0."""
    if c <= 4:
        v = builder.shl(qh, _splat(_i8, 32, 4 - c))
    else:
        v = builder.lshr(qh, _splat(_i8, 32, c - 4))
    return builder.and_(v, _splat(_i8, 32, 16))


def _q45k_typer(acc, w, o, xq, xd, xm, xo):
    ok = (
        acc == F32x16
        and _is_1d(w, (types.uint8,))
        and _is_1d(xq, (types.int8,))
        and _is_1d(xd, (types.float32,))
        and _is_1d(xm, (types.float32,))
        and isinstance(o, types.Integer)
        and isinstance(xo, types.Integer)
    )
    return F32x16(acc, w, o, xq, xd, xm, xo) if ok else None


def _same_int(context, builder, sig, args):
    """Cast the two integer offsets (o, xo) to int64 so the IR sees one index type."""
    out = list(args)
    for i in (2, 6):
        out[i] = context.cast(builder, args[i], sig.args[i], types.int64)
    return out


@intrinsic
def q4k_block(typingctx, acc, w, o, xq, xd, xm, xo):
    """acc + the Q4_K super-block at byte o of w dotted with xq[xo:xo+256] (xo % 256 == 0).

    xd: per-32 activation scales; xm: per-32 activation sums (xs[2k] + xs[2k+1]),
    both indexed by xo // 32. Lane layout of acc is internal: only its sum means anything.
    """
    sig = _q45k_typer(acc, w, o, xq, xd, xm, xo)
    if sig is None:
        return None

    def codegen(context, builder, sig, args):
        return _q45k_block(context, builder, sig, _same_int(context, builder, sig, args), five=False)

    return sig, codegen


@intrinsic
def q5k_block(typingctx, acc, w, o, xq, xd, xm, xo):
    """q4k_block for a Q5_K super-block (176 bytes: Q4_K's fields plus 32 bytes of fifth bits)."""
    sig = _q45k_typer(acc, w, o, xq, xd, xm, xo)
    if sig is None:
        return None

    def codegen(context, builder, sig, args):
        return _q45k_block(context, builder, sig, _same_int(context, builder, sig, args), five=True)

    return sig, codegen


# ---- Q6_K --------------------------------------------------------------------------------


@intrinsic
def q6k_block(typingctx, acc, w, o, xq, xd, xs, xo):
    """acc + the Q6_K super-block at byte o of w dotted with xq[xo:xo+256] (xo % 256 == 0).

    xd: per-32 activation scales (index xo // 32); xs: per-16 activation sums
    (index xo // 16) for the -32 offset of the 6-bit codes.
    """
    sig = _q45k_typer(acc, w, o, xq, xd, xs, xo)
    if sig is None:
        return None

    def codegen(context, builder, sig, args):
        acc, wa, o, xqa, xda, xsa, xo = _same_int(context, builder, sig, args)
        w = _Args(context, builder, sig.args[1], wa)
        xq = _Args(context, builder, sig.args[3], xqa)
        xd = _Args(context, builder, sig.args[4], xda)
        xs = _Args(context, builder, sig.args[5], xsa)
        v16f = _vec(_f32, 16)
        d = builder.fpext(w.load(_off(builder, o, 208), _half), _f32)
        s = builder.fmul(
            builder.sitofp(w.load(_off(builder, o, 192), _vec(_i8, 16)), v16f), _bcast(builder, d, 16)
        )  # d * scale_g
        # the codes are u - 32: subtract 32 * sum_g s_g * xs_g
        xs16 = xs.load(builder.lshr(xo, ir.Constant(xo.type, 4)), v16f, 4)
        acc = _call(builder, "llvm.fma.v16f32", v16f, [builder.fmul(s, _splat(_f32, 16, -32.0)), xs16, acc])
        xd8 = xd.load(builder.lshr(xo, ir.Constant(xo.type, 5)), _vec(_f32, 8), 4)
        g = builder.fmul(s, _shuffle(builder, xd8, xd8, [k // 2 for k in range(16)]))  # g: d * scale_g * xd
        v32 = _vec(_i8, 32)
        m15, m48 = _splat(_i8, 32, 15), _splat(_i8, 32, 0x30)
        for h in range(2):
            ql0 = w.load(_off(builder, o, 64 * h), v32)
            ql1 = w.load(_off(builder, o, 64 * h + 32), v32)
            qh = w.load(_off(builder, o, 128 + 32 * h), v32)
            hb = [
                builder.and_(builder.shl(qh, _splat(_i8, 32, 4)), m48),
                builder.and_(builder.shl(qh, _splat(_i8, 32, 2)), m48),
                builder.and_(qh, m48),
                builder.and_(builder.lshr(qh, _splat(_i8, 32, 2)), m48),
            ]
            us = [
                builder.or_(builder.and_(ql0, m15), hb[0]),
                builder.or_(builder.and_(ql1, m15), hb[1]),
                builder.or_(builder.lshr(ql0, _splat(_i8, 32, 4)), hb[2]),
                builder.or_(builder.lshr(ql1, _splat(_i8, 32, 4)), hb[3]),
            ]
            for p in range(2):
                c = 4 * h + 2 * p  # chunks c, c+1: sub-blocks 2c .. 2c+3, 4 lanes each
                f = _shuffle(builder, g, g, [2 * c + k // 4 for k in range(16)])
                acc = _pair_fma(builder, acc, us[2 * p], us[2 * p + 1], xq, _off(builder, xo, 32 * c), f)
        return acc

    return sig, codegen
