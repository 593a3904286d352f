"""SIMD pieces for the non-linear 4-bit codes (IQ4_NL, IQ4_XS, MXFP4): nibbles through a 16-entry table.

`iq4nl_i8x32(ary, idx)` / `mxfp4_i8x32(ary, idx)`: the 32 nibbles of the 16 bytes
ary[idx:idx+16] (low nibbles are lanes 0-15, high ones 16-31, the GGML order)
mapped through iq_tables.KVALUES_IQ4NL / KVALUES_MXFP4 into signed int8. With
AVX2 one `vpshufb` does the lookup (the table held in both 128-bit lanes);
elsewhere a chain of 16 vector selects that LLVM lowers for the host.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from modelc.kernels.quant.iq_tables import KVALUES_IQ4NL, KVALUES_MXFP4
from modelc.kernels.runtime.cpu import HAS_AVX2, HAS_AVX512_VNNI, HAS_VNNI
from modelc.kernels.simd import qdot_k as qk
from modelc.kernels.simd.qdot import (
    I8x32,
    _call,
    _check_1d,
    _dot_avx2,
    _dot_u_avx2,
    _f32,
    _i8,
    _i32,
    _ptr_at,
    _v32i8,
    dot4_generic,
)

_v16i8 = ir.VectorType(_i8, 16)


def _nibbles(context, builder, aryty, ary, idx):
    p = _ptr_at(context, builder, aryty, ary, idx, _v16i8)
    v = builder.load(p, align=1)
    lo = builder.and_(v, ir.Constant(_v16i8, [15] * 16))
    hi = builder.lshr(v, ir.Constant(_v16i8, [4] * 16))
    return builder.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(_i32, 32), list(range(32))))


def _lut16(builder, nib, table):
    """Lane k = table[nib[k]] for nib in 0..15 (int8 results)."""
    vals = [int(v) & 0xFF for v in table]
    if HAS_AVX2:
        tab = ir.Constant(_v32i8, vals + vals)
        return _call(builder, "llvm.x86.avx2.pshuf.b", _v32i8, [tab, nib])
    return _select_lut(builder, nib, vals, _v32i8)


def _select_lut(builder, nib, vals, ty):
    """Lane k = vals[nib[k]] for nib (of vector type ty) in 0..15: a chain of 16 selects, for hosts without vpshufb."""
    n = ty.count
    out = ir.Constant(ty, [vals[0]] * n)
    for k in range(1, 16):
        hit = builder.icmp_unsigned("==", nib, ir.Constant(ty, [k] * n))
        out = builder.select(hit, ir.Constant(ty, [vals[k]] * n), out)
    return out


def _lut_typer(ary, idx, table):
    if not (_check_1d(ary) and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        return _lut16(builder, _nibbles(context, builder, sig.args[0], args[0], args[1]), table)

    return I8x32(ary, idx), codegen


@intrinsic
def iq4nl_i8x32(typingctx, ary, idx):
    """IQ4_NL codes of the 16 bytes ary[idx:idx+16] -> I8x32 of KVALUES_IQ4NL values (GGML order)."""
    return _lut_typer(ary, idx, KVALUES_IQ4NL)


@intrinsic
def mxfp4_i8x32(typingctx, ary, idx):
    """MXFP4 codes of the 16 bytes ary[idx:idx+16] -> I8x32 of KVALUES_MXFP4 values (GGML order)."""
    return _lut_typer(ary, idx, KVALUES_MXFP4)


# ---- IQ4_XS: a whole super-block into a 16-lane accumulator ---------------------------------------
#
# Where the dot is vpdpbusd (AVX512-VNNI, AVX-VNNI) or portable IR, the codes go through the table as
# kvalue + 128 (1..241, unsigned): one unsigned x signed dot per pair of sub-blocks, exact in int32,
# and the +128 comes back out as 128 * scale * (the sub-block's activation sum), from the per-32 sums
# quantize_act already returns. Plain AVX2 (vpmaddubsw would saturate on codes > 128) dots the signed
# values with the abs/sign trick instead and needs no correction.

OFFSET = 0 if (HAS_AVX2 and not HAS_VNNI) else 128
"""What iq4xs_block adds to each code before the unsigned dot (0: the signed AVX2 path)."""


def _lut64(builder, nib, table, offset=OFFSET):
    """<64 x i8> nibbles -> (table[nib] + offset) as bytes: vpshufb (512 or 2 x 256 bits), selects elsewhere."""
    vals = [(int(v) + offset) & 0xFF for v in table]
    v64 = ir.VectorType(_i8, 64)
    if HAS_AVX512_VNNI:
        return _call(builder, "llvm.x86.avx512.pshuf.b.512", v64, [ir.Constant(v64, vals * 4), nib])
    if HAS_AVX2:
        tab = ir.Constant(_v32i8, vals * 2)
        lo = _call(builder, "llvm.x86.avx2.pshuf.b", _v32i8, [tab, qk._shuffle(builder, nib, nib, range(32))])
        hi = _call(builder, "llvm.x86.avx2.pshuf.b", _v32i8, [tab, qk._shuffle(builder, nib, nib, range(32, 64))])
        return qk._shuffle(builder, lo, hi, range(64))
    return _select_lut(builder, nib, vals, v64)


def _dot64(builder, u, a):
    """<64 x i8> codes (OFFSET-shifted) . <64 x i8> a (signed) -> <16 x i32>, lane k = bytes 4k..4k+3, exact."""
    v16 = ir.VectorType(_i32, 16)
    if HAS_AVX512_VNNI:
        args = [ir.Constant(v16, [0] * 16), builder.bitcast(u, v16), builder.bitcast(a, v16)]
        return _call(builder, "llvm.x86.avx512.vpdpbusd.512", v16, args)
    if HAS_AVX2:  # two 256-bit halves: vpdpbusd (AVX-VNNI / AVX512-VL) or signed vpmaddubsw
        halves = []
        for h in (range(32), range(32, 64)):
            uh, ah = qk._shuffle(builder, u, u, h), qk._shuffle(builder, a, a, h)
            halves.append(_dot_u_avx2(builder, uh, ah) if HAS_VNNI else _dot_avx2(builder, uh, ah))
        return qk._shuffle(builder, halves[0], halves[1], range(16))
    return dot4_generic(builder, u, a, signed=False)


@intrinsic
def iq4xs_block(typingctx, acc, w, o, xq, xd, xm, xo):
    """acc + the IQ4_XS super-block at byte o of w dotted with xq[xo:xo+256] (xo % 256 == 0).

    xd: per-32 activation scales; xm: per-32 activation sums (xs[2k] + xs[2k+1]), both
    indexed by xo // 32 (qdot_k.q4k_block's contract). Exact int32 dots on every path.
    """
    sig = qk._q45k_typer(acc, w, o, xq, xd, xm, xo)
    if sig is None:
        return None

    def codegen(context, builder, sig, args):
        acc, wa, o, xqa, xda, xma, xo = qk._same_int(context, builder, sig, args)
        w = qk._Args(context, builder, sig.args[1], wa)
        xq = qk._Args(context, builder, sig.args[3], xqa)
        xd = qk._Args(context, builder, sig.args[4], xda)
        xm = qk._Args(context, builder, sig.args[5], xma)
        v8i, v8f, v16f = ir.VectorType(_i32, 8), ir.VectorType(_f32, 8), ir.VectorType(_f32, 16)
        d = builder.fpext(w.load(o, ir.HalfType()), _f32)
        sh = builder.zext(w.load(qk._off(builder, o, 2), ir.IntType(16)), _i32)
        sl = w.load(qk._off(builder, o, 4), _i32)
        # sub-block ib: ((sl >> 4 ib) & 15) | ((sh >> 2 ib) & 3) << 4, minus 32
        slv = builder.insert_element(ir.Constant(v8i, ir.Undefined), sl, _i32(0))
        slv = qk._shuffle(builder, slv, slv, [0] * 8)
        shv = builder.insert_element(ir.Constant(v8i, ir.Undefined), sh, _i32(0))
        shv = qk._shuffle(builder, shv, shv, [0] * 8)
        lo = builder.and_(builder.lshr(slv, ir.Constant(v8i, [4 * k for k in range(8)])), ir.Constant(v8i, [15] * 8))
        hi = builder.and_(builder.lshr(shv, ir.Constant(v8i, [2 * k for k in range(8)])), ir.Constant(v8i, [3] * 8))
        ls = builder.sub(builder.or_(lo, builder.shl(hi, ir.Constant(v8i, [4] * 8))), ir.Constant(v8i, [32] * 8))
        s = builder.fmul(builder.sitofp(ls, v8f), qk._bcast(builder, d, 8))  # d * (ls - 32) per sub-block
        xc = builder.lshr(xo, ir.Constant(xo.type, 5))
        fac = builder.fmul(s, xd.load(xc, v8f, 4))
        if OFFSET:
            corr = builder.fmul(builder.fmul(s, xm.load(xc, v8f, 4)), ir.Constant(v8f, [float(OFFSET)] * 8))
            acc = builder.fsub(acc, qk._shuffle(builder, corr, ir.Constant(v8f, [0.0] * 8), range(16)))
        v32 = ir.VectorType(_i8, 32)
        for j in range(4):  # sub-blocks 2j, 2j+1: 32 code bytes, 64 activations
            q = w.load(qk._off(builder, o, 8 + 32 * j), v32)
            lo8 = builder.and_(q, ir.Constant(v32, [15] * 32))
            hi8 = builder.lshr(q, ir.Constant(v32, [4] * 32))
            nib = qk._shuffle(builder, lo8, hi8, [*range(16), *range(32, 48), *range(16, 32), *range(48, 64)])
            u = _lut64(builder, nib, KVALUES_IQ4NL)
            p = builder.sitofp(_dot64(builder, u, xq.load(qk._off(builder, xo, 64 * j), ir.VectorType(_i8, 64))), v16f)
            f = qk._shuffle(builder, fac, fac, [2 * j] * 8 + [2 * j + 1] * 8)
            acc = _call(builder, "llvm.fma.v16f32", v16f, [p, f, acc])
        return acc

    return sig, codegen


# ---- IQ4_NL / MXFP4: eight 32-element blocks into a 16-lane accumulator ----------------------------


def _blocks8(context, builder, sig, args, mx):
    acc, wa, o, xqa, xda, xma, xo = qk._same_int(context, builder, sig, args)
    w = qk._Args(context, builder, sig.args[1], wa)
    xq = qk._Args(context, builder, sig.args[3], xqa)
    xd = qk._Args(context, builder, sig.args[4], xda)
    xm = qk._Args(context, builder, sig.args[5], xma)
    bsize, coff = (17, 1) if mx else (18, 2)
    v8i, v8f, v16f = ir.VectorType(_i32, 8), ir.VectorType(_f32, 8), ir.VectorType(_f32, 16)
    if mx:  # e8m0 byte e -> 2^(e - 128): e < 2 is a subnormal (0x00200000 << e), else exponent e - 1
        e = ir.Constant(v8i, ir.Undefined)
        for k in range(8):
            e = builder.insert_element(e, builder.zext(w.load(qk._off(builder, o, k * bsize), _i8), _i32), _i32(k))
        small = builder.icmp_unsigned("<", e, ir.Constant(v8i, [2] * 8))
        sub = builder.shl(ir.Constant(v8i, [0x00200000] * 8), e)
        norm = builder.shl(builder.sub(e, ir.Constant(v8i, [1] * 8)), ir.Constant(v8i, [23] * 8))
        d = builder.bitcast(builder.select(small, sub, norm), v8f)
    else:
        h = ir.Constant(ir.VectorType(ir.HalfType(), 8), ir.Undefined)
        for k in range(8):
            h = builder.insert_element(h, w.load(qk._off(builder, o, k * bsize), ir.HalfType()), _i32(k))
        d = builder.fpext(h, v8f)
    xc = builder.lshr(xo, ir.Constant(xo.type, 5))
    fac = builder.fmul(d, xd.load(xc, v8f, 4))
    if OFFSET:
        corr = builder.fmul(builder.fmul(d, xm.load(xc, v8f, 4)), ir.Constant(v8f, [float(OFFSET)] * 8))
        acc = builder.fsub(acc, qk._shuffle(builder, corr, ir.Constant(v8f, [0.0] * 8), range(16)))
    v16 = ir.VectorType(_i8, 16)
    m15, s4 = ir.Constant(v16, [15] * 16), ir.Constant(v16, [4] * 16)
    for j in range(4):  # blocks 2j, 2j+1: 64 activations
        q0 = w.load(qk._off(builder, o, 2 * j * bsize + coff), v16)
        q1 = w.load(qk._off(builder, o, (2 * j + 1) * bsize + coff), v16)
        b0 = qk._shuffle(builder, builder.and_(q0, m15), builder.lshr(q0, s4), range(32))
        b1 = qk._shuffle(builder, builder.and_(q1, m15), builder.lshr(q1, s4), range(32))
        u = _lut64(builder, qk._shuffle(builder, b0, b1, range(64)), KVALUES_MXFP4 if mx else KVALUES_IQ4NL)
        a = xq.load(qk._off(builder, xo, 64 * j), ir.VectorType(_i8, 64))
        p = builder.sitofp(_dot64(builder, u, a), v16f)
        f = qk._shuffle(builder, fac, fac, [2 * j] * 8 + [2 * j + 1] * 8)
        acc = _call(builder, "llvm.fma.v16f32", v16f, [p, f, acc])
    return acc


@intrinsic
def iq4nl_blocks8(typingctx, acc, w, o, xq, xd, xm, xo):
    """acc + the eight IQ4_NL blocks from byte o of w dotted with xq[xo:xo+256] (xo % 256 == 0).

    xd / xm: per-32 activation scales / sums (index xo // 32), as iq4xs_block."""
    sig = qk._q45k_typer(acc, w, o, xq, xd, xm, xo)
    if sig is None:
        return None

    def codegen(context, builder, sig, args):
        return _blocks8(context, builder, sig, args, mx=False)

    return sig, codegen


@intrinsic
def mxfp4_blocks8(typingctx, acc, w, o, xq, xd, xm, xo):
    """iq4nl_blocks8 for eight MXFP4 blocks (17 bytes each: an e8m0 scale, 16 code bytes)."""
    sig = qk._q45k_typer(acc, w, o, xq, xd, xm, xo)
    if sig is None:
        return None

    def codegen(context, builder, sig, args):
        return _blocks8(context, builder, sig, args, mx=True)

    return sig, codegen
