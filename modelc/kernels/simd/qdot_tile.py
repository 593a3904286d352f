"""64-element SIMD pieces for the register-tiled small GEMM (gemm_tile*.py).

Owns the 512-bit vector types (`I8x64`, `I32x16`, `F32x16`), the unsigned x
signed int8 dot with an int32 start value (`dot_u8x64`: one `vpdpbusd` zmm with
AVX512-VNNI, two ymm ones with AVX-VNNI, `vpmaddubsw`+`vpmaddwd` with AVX2,
portable IR elsewhere; LLVM splits the 512-bit generic ops into 256-bit halves
on CPUs without AVX-512), and the per-type block unpackers that turn stored
bytes straight into 64 unsigned codes in NATURAL element order, with the
matching per-lane scale vectors; and the AMX int8 tile pieces of
gemm_tile_amx (HAS_AMX: the CPU's amx-int8 plus the kernel's per-process
permission; MODELC_NO_AMX=1 turns it off). qdot.py's CPU switches
(MODELC_NO_AVX2, MODELC_NO_VNNI) apply here too.

Over 700 lines on purpose, as qdot.py: each intrinsic is a few lines of IR on
the shared vector types and helpers.

Lane layout: lane k of an I32x16 dot covers elements 4k..4k+3 of the 64, so
lanes 0-7 are the first 32-element block and 8-15 the second; a 16-element
K-quant sub-block is 4 lanes.

An edit here starts a fresh numba cache folder for every kernel (kernels/runtime/jit_cache.py: keyed by
the digest of all kernel sources), so kernels that inline these intrinsics never load stale code.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types

from modelc.kernels.runtime.cpu import HAS_AMX, HAS_AVX2, HAS_AVX512_VNNI, HAS_VNNI, WIDE_DOT_EXACT  # noqa: F401
from modelc.kernels.simd.qdot import (  # noqa: F401  (splat/store_f32x16 re-exported for gemm_tile*)
    F32x16,
    VecType,
    _call,
    _check_1d,
    _ptr_at,
    dot4_generic,
    intrinsic,
    splat_f32x16,
    store_f32x16,
)

HAS_VNNI512 = HAS_AVX512_VNNI
"""True when dot_u8x64 is one zmm vpdpbusd (AVX512-VNNI; cpu.HAS_AVX512_VNNI)."""

I8x64 = VecType(types.int8, 64)
I32x16 = VecType(types.int32, 16)

_i8, _i16, _i32, _f32, _half = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.FloatType(), ir.HalfType()
_v16i8 = ir.VectorType(_i8, 16)
_v32i8 = ir.VectorType(_i8, 32)
_v64i8 = ir.VectorType(_i8, 64)
_v16i16 = ir.VectorType(_i16, 16)
_v8i32 = ir.VectorType(_i32, 8)
_v16i32 = ir.VectorType(_i32, 16)
_v16f32 = ir.VectorType(_f32, 16)


def _idx(n: int, values: list[int]) -> ir.Constant:
    return ir.Constant(ir.VectorType(_i32, n), values)


def _cat(builder, a, b):
    """Concatenate two vectors of the same type."""
    n = a.type.count
    return builder.shuffle_vector(a, b, _idx(2 * n, list(range(2 * n))))


def _half_of(builder, v, k):
    """Half k (0 = low) of a vector."""
    n = v.type.count // 2
    return builder.shuffle_vector(v, v, _idx(n, list(range(k * n, (k + 1) * n))))


def _load(context, builder, aryty, ary, idx, llty, off=0):
    if off:
        idx = builder.add(idx, ir.Constant(idx.type, off))
    return builder.load(_ptr_at(context, builder, aryty, ary, idx, llty), align=1)


def _splat(builder, x, vty):
    v = builder.insert_element(ir.Constant(vty, ir.Undefined), x, ir.Constant(_i32, 0))
    return builder.shuffle_vector(v, v, _idx(vty.count, [0] * vty.count))


def _f16(context, builder, aryty, ary, idx, off):
    return builder.fpext(builder.bitcast(_load(context, builder, aryty, ary, idx, _i16, off), _half), _f32)


def _byte_vec(v, k):
    return ir.Constant(ir.VectorType(_i8, v), [k] * v)


def _nib_lo_hi(builder, v):
    """(v & 15, v >> 4) per byte."""
    n = v.type.count
    return builder.and_(v, _byte_vec(n, 15)), builder.lshr(v, _byte_vec(n, 4))


# ---- the dot ------------------------------------------------------------------------


def _dot_u8x64(builder, acc, u, a):
    if HAS_VNNI512:
        args = [acc, builder.bitcast(u, _v16i32), builder.bitcast(a, _v16i32)]
        return _call(builder, "llvm.x86.avx512.vpdpbusd.512", _v16i32, args)
    if not HAS_AVX2:
        return builder.add(acc, dot4_generic(builder, u, a, signed=False))
    halves = []
    for k in range(2):
        c, uk, ak = _half_of(builder, acc, k), _half_of(builder, u, k), _half_of(builder, a, k)
        if HAS_VNNI:
            args = [c, builder.bitcast(uk, _v8i32), builder.bitcast(ak, _v8i32)]
            halves.append(_call(builder, "llvm.x86.avx512.vpdpbusd.256", _v8i32, args))
        else:  # u <= 63: the i16 pair sums never saturate
            p16 = _call(builder, "llvm.x86.avx2.pmadd.ub.sw", _v16i16, [uk, ak])
            ones = ir.Constant(_v16i16, [1] * 16)
            halves.append(builder.add(c, _call(builder, "llvm.x86.avx2.pmadd.wd", _v8i32, [p16, ones])))
    return _cat(builder, halves[0], halves[1])


@intrinsic
def dot_u8x64(typingctx, acc, u, a):
    """acc + per-lane sum of 4 products u * a (u unsigned, a signed): lane k = elements 4k..4k+3.

    Exact for u <= 63 everywhere and for u <= 255 where WIDE_DOT_EXACT.
    """
    if not (acc == I32x16 and u == I8x64 and a == I8x64):
        return None

    def codegen(context, builder, sig, args):
        return _dot_u8x64(builder, *args)

    return I32x16(acc, u, a), codegen


def _dot_runs(builder, acc, us, avs, run):
    """acc + the dots of the (us[i], avs[i]) pairs. With AVX2 but no VNNI, `run` consecutive vpmaddubsw results
    are summed as int16 before one vpmaddwd (exact only where run * 2 * max(u) * 127 <= 32767: the caller's
    bound on its codes); elsewhere one dot_u8x64 each."""
    if HAS_VNNI512 or HAS_VNNI or not HAS_AVX2:
        for u, a in zip(us, avs, strict=True):
            acc = _dot_u8x64(builder, acc, u, a)
        return acc
    ones = ir.Constant(_v16i16, [1] * 16)
    halves = []
    for k in range(2):
        c = _half_of(builder, acc, k)
        for r in range(0, len(us), run):
            s16 = None
            for u, a in zip(us[r : r + run], avs[r : r + run], strict=True):
                p16 = _call(
                    builder, "llvm.x86.avx2.pmadd.ub.sw", _v16i16, [_half_of(builder, u, k), _half_of(builder, a, k)]
                )
                s16 = p16 if s16 is None else builder.add(s16, p16)
            c = builder.add(c, _call(builder, "llvm.x86.avx2.pmadd.wd", _v8i32, [s16, ones]))
        halves.append(c)
    return _cat(builder, halves[0], halves[1])


@intrinsic
def dot8_u4_u8x64(typingctx, acc, u0, u1, u2, u3, u4, u5, u6, u7, a0, a1, a2, a3, a4, a5, a6, a7):
    """acc + the 8 dots (u_i, a_i) as dot_u8x64 chains them, for codes u <= 15 (Q4_0, Q4_K nibbles): with AVX2
    but no VNNI the 8 pair products add up as int16 (8 * 2 * 15 * 127 < 2^15) before one vpmaddwd, 17 ops a
    ymm half instead of 24."""
    if not (
        acc == I32x16 and all(v == I8x64 for v in (u0, u1, u2, u3, u4, u5, u6, u7, a0, a1, a2, a3, a4, a5, a6, a7))
    ):
        return None

    def codegen(context, builder, sig, args):
        return _dot_runs(builder, args[0], args[1:9], args[9:17], 8)

    return I32x16(acc, u0, u1, u2, u3, u4, u5, u6, u7, a0, a1, a2, a3, a4, a5, a6, a7), codegen


@intrinsic
def dot4_u6_u8x64(typingctx, acc, u0, u1, u2, u3, a0, a1, a2, a3):
    """acc + the 4 dots (u_i, a_i) for codes u <= 63 (Q6_K): with AVX2 but no VNNI, pairs of vpmaddubsw results
    add up as int16 (2 * 2 * 63 * 127 < 2^15), two vpmaddwd instead of four."""
    if not (acc == I32x16 and all(v == I8x64 for v in (u0, u1, u2, u3, a0, a1, a2, a3))):
        return None

    def codegen(context, builder, sig, args):
        return _dot_runs(builder, args[0], args[1:5], args[5:9], 2)

    return I32x16(acc, u0, u1, u2, u3, a0, a1, a2, a3), codegen


@intrinsic
def sdot_i8x64(typingctx, acc, w, a):
    """acc + per-lane sum of 4 products w * a, both signed (|a| <= 127): with AVX2, |w| x (a * sign(w)) per
    ymm half (vpabsb, vpsignb; pair sums <= 2 * 128 * 127 < 2^15, exact), so Q8_0's codes need no + 128
    offset where no VNNI makes that wide dot exact (gemm_r16's Q8_0 on AVX2)."""
    if not (acc == I32x16 and w == I8x64 and a == I8x64):
        return None

    def codegen(context, builder, sig, args):
        c, w, a = args
        if not HAS_AVX2:
            return builder.add(c, dot4_generic(builder, w, a, signed=True))
        aw = _call(builder, "llvm.abs.v64i8", _v64i8, [w, ir.Constant(ir.IntType(1), 0)])
        sa = [_call(builder, "llvm.x86.avx2.psign.b", _v32i8, [_half_of(builder, a, k), _half_of(builder, w, k)]) for k in range(2)]  # fmt: skip
        return _dot_u8x64(builder, c, aw, _cat(builder, sa[0], sa[1]))  # its pair sums stay exact: <= 2 * 128 * 127

    return I32x16(acc, w, a), codegen


# ---- loads, stores, float ops ----------------------------------------------------------


@intrinsic
def load_i8x64(typingctx, ary, idx):
    """64 int8 at element idx of a 1-D C int8/uint8 array."""
    if not (_check_1d(ary) and ary.dtype in (types.int8, types.uint8) and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        return _load(context, builder, sig.args[0], args[0], args[1], _v64i8)

    return I8x64(ary, idx), codegen


@intrinsic
def load_i32x16(typingctx, ary, idx):
    """16 int32 at element idx of a 1-D C int32 array."""
    if not (_check_1d(ary) and ary.dtype == types.int32 and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        return _load(context, builder, sig.args[0], args[0], args[1], _v16i32)

    return I32x16(ary, idx), codegen


@intrinsic
def store_i32x16(typingctx, ary, idx, v):
    if not (_check_1d(ary) and ary.dtype == types.int32 and v == I32x16):
        return None

    def codegen(context, builder, sig, args):
        builder.store(args[2], _ptr_at(context, builder, sig.args[0], args[0], args[1], _v16i32), align=4)
        return context.get_dummy_value()

    return types.none(ary, idx, v), codegen


@intrinsic
def zeros_i32x16(typingctx):
    def codegen(context, builder, sig, args):
        return ir.Constant(_v16i32, [0] * 16)

    return I32x16(), codegen


@intrinsic
def lanesum_i8x64(typingctx, ary, idx, k):
    """Lane j = k * (sum of int8 ary[idx+4j : idx+4j+4]) as I32x16 (activation offsets)."""
    if not (_check_1d(ary) and ary.dtype == types.int8 and isinstance(k, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        a = _load(context, builder, sig.args[0], args[0], args[1], _v64i8)
        s = _dot_u8x64(builder, ir.Constant(_v16i32, [0] * 16), _byte_vec(64, 1), a)
        kk = builder.trunc(args[2], _i32) if args[2].type.width > 32 else builder.sext(args[2], _i32)
        return builder.mul(s, _splat(builder, kk, _v16i32))

    return I32x16(ary, idx, k), codegen


@intrinsic
def pair_f32x16(typingctx, a, b):
    """[a] * 8 + [b] * 8."""
    if a != types.float32 or b != types.float32:
        return None

    def codegen(context, builder, sig, args):
        v = ir.Constant(ir.VectorType(_f32, 2), ir.Undefined)
        v = builder.insert_element(v, args[0], ir.Constant(_i32, 0))
        v = builder.insert_element(v, args[1], ir.Constant(_i32, 1))
        return builder.shuffle_vector(v, v, _idx(16, [0] * 8 + [1] * 8))

    return F32x16(a, b), codegen


@intrinsic
def fmadot_f32x16(typingctx, acc, p, s, x):
    """acc + float(p) * (s * x): one block-dot's contribution with weight and activation scales."""
    if not (acc == F32x16 and p == I32x16 and s == F32x16 and x == F32x16):
        return None

    def codegen(context, builder, sig, args):
        pf = builder.sitofp(args[1], _v16f32)
        return _call(builder, "llvm.fma.v16f32", _v16f32, [pf, builder.fmul(args[2], args[3]), args[0]])

    return F32x16(acc, p, s, x), codegen


# ---- block unpacking: stored bytes -> 64 unsigned codes in natural order ----------------


@intrinsic
def q4_0_pair(typingctx, w, o, o1):
    """Q4_0 blocks at bytes o and o1 (uint8 1-D C array) -> (64 codes 0..15, F32x16 [d0]*8+[d1]*8).

    Element order is natural: nibble j of a block's 16 bytes is element j (low) / j+16 (high).
    """
    if not (_check_1d(w) and isinstance(o, types.Integer) and isinstance(o1, types.Integer)):
        return None
    ret = types.Tuple((I8x64, F32x16))

    def codegen(context, builder, sig, args):
        aty, ary, idx, idx1 = sig.args[0], args[0], args[1], args[2]
        v = _cat(
            builder,
            _load(context, builder, aty, ary, idx, _v16i8, 2),
            _load(context, builder, aty, ary, idx1, _v16i8, 2),
        )
        lo, hi = _nib_lo_hi(builder, v)
        # [lo0, hi0, lo1, hi1] in 16-byte pieces
        perm = list(range(0, 16)) + list(range(32, 48)) + list(range(16, 32)) + list(range(48, 64))
        u = builder.shuffle_vector(lo, hi, _idx(64, perm))
        d0 = _f16(context, builder, aty, ary, idx, 0)
        d1 = _f16(context, builder, aty, ary, idx1, 0)
        s = builder.insert_element(ir.Constant(ir.VectorType(_f32, 2), ir.Undefined), d0, ir.Constant(_i32, 0))
        s = builder.insert_element(s, d1, ir.Constant(_i32, 1))
        s = builder.shuffle_vector(s, s, _idx(16, [0] * 8 + [1] * 8))
        return context.make_tuple(builder, ret, [u, s])

    return ret(w, o, o1), codegen


@intrinsic
def q8_0_pair(typingctx, w, o, o1):
    """Q8_0 blocks at bytes o and o1 -> (64 codes q + 128 as unsigned bytes, F32x16 [d0]*8+[d1]*8)."""
    if not (_check_1d(w) and isinstance(o, types.Integer) and isinstance(o1, types.Integer)):
        return None
    ret = types.Tuple((I8x64, F32x16))

    def codegen(context, builder, sig, args):
        aty, ary, idx, idx1 = sig.args[0], args[0], args[1], args[2]
        v = _cat(
            builder,
            _load(context, builder, aty, ary, idx, _v32i8, 2),
            _load(context, builder, aty, ary, idx1, _v32i8, 2),
        )
        u = builder.xor(v, _byte_vec(64, -128))
        d0 = _f16(context, builder, aty, ary, idx, 0)
        d1 = _f16(context, builder, aty, ary, idx1, 0)
        s = builder.insert_element(ir.Constant(ir.VectorType(_f32, 2), ir.Undefined), d0, ir.Constant(_i32, 0))
        s = builder.insert_element(s, d1, ir.Constant(_i32, 1))
        s = builder.shuffle_vector(s, s, _idx(16, [0] * 8 + [1] * 8))
        return context.make_tuple(builder, ret, [u, s])

    return ret(w, o, o1), codegen


@intrinsic
def q4_k_codes(typingctx, w, o):
    """64 bytes of Q4_K qs at byte o -> two I8x64: elements 0..63 and 64..127 of that 128 (codes 0..15).

    Byte l's low nibble is element l (l < 32) or l+32 (l >= 32); its high nibble element l+32 / l+64.
    """
    if not (_check_1d(w) and isinstance(o, types.Integer)):
        return None
    ret = types.UniTuple(I8x64, 2)

    def codegen(context, builder, sig, args):
        lo, hi = _nib_lo_hi(builder, _load(context, builder, sig.args[0], args[0], args[1], _v64i8))
        g0 = builder.shuffle_vector(lo, hi, _idx(64, list(range(32)) + list(range(64, 96))))
        g1 = builder.shuffle_vector(lo, hi, _idx(64, list(range(32, 64)) + list(range(96, 128))))
        return context.make_tuple(builder, ret, [g0, g1])

    return ret(w, o), codegen


@intrinsic
def q4_k_scales(typingctx, w, o):
    """Q4_K super-block at byte o -> (4 F32x16 per-lane scales of its 64-element groups, F32x16 mins).

    Group k covers sub-blocks 2k, 2k+1: lanes [d*sc_2k]*8 + [d*sc_2k+1]*8. The mins vector is
    per 16-element half-sub-block, negated: lane g = -dmin * m_{g//2} (multiply by xs).
    """
    if not (_check_1d(w) and isinstance(o, types.Integer)):
        return None
    ret = types.UniTuple(F32x16, 5)

    def codegen(context, builder, sig, args):
        aty, ary, idx = sig.args[0], args[0], args[1]
        a, m, md = (_load(context, builder, aty, ary, idx, _i32, 4 + 4 * k) for k in range(3))

        def k32(x):
            return ir.Constant(_i32, x)

        sc_lo = builder.and_(a, k32(0x3F3F3F3F))
        sc_hi = builder.or_(builder.and_(md, k32(0x0F0F0F0F)), builder.and_(builder.lshr(a, k32(2)), k32(0x30303030)))
        mn_lo = builder.and_(m, k32(0x3F3F3F3F))
        mn_hi = builder.or_(
            builder.and_(builder.lshr(md, k32(4)), k32(0x0F0F0F0F)),
            builder.and_(builder.lshr(m, k32(2)), k32(0x30303030)),
        )
        v4 = ir.Constant(ir.VectorType(_i32, 4), ir.Undefined)
        for k, x in enumerate((sc_lo, sc_hi, mn_lo, mn_hi)):
            v4 = builder.insert_element(v4, x, k32(k))
        f = builder.uitofp(builder.zext(builder.bitcast(v4, _v16i8), _v16i32), _v16f32)
        d = _f16(context, builder, aty, ary, idx, 0)
        dmin = builder.fneg(_f16(context, builder, aty, ary, idx, 2))
        dd = builder.shuffle_vector(
            _splat(builder, d, ir.VectorType(_f32, 1)),
            _splat(builder, dmin, ir.VectorType(_f32, 1)),
            _idx(16, [0] * 8 + [1] * 8),
        )
        f = builder.fmul(f, dd)  # lanes 0-7: d*sc_j, 8-15: -dmin*m_j
        out = [builder.shuffle_vector(f, f, _idx(16, [2 * k] * 8 + [2 * k + 1] * 8)) for k in range(4)]
        out.append(builder.shuffle_vector(f, f, _idx(16, [8 + g // 2 for g in range(16)])))
        return context.make_tuple(builder, ret, out)

    return ret(w, o), codegen


@intrinsic
def q6_k_codes(typingctx, w, ql, qh):
    """Q6_K: 64 ql bytes at byte ql, 32 qh bytes at byte qh -> two I8x64 (elements 0..63, 64..127 of a
    128-element half), codes 0..63 (value + 32)."""
    if not (_check_1d(w) and isinstance(ql, types.Integer) and isinstance(qh, types.Integer)):
        return None
    ret = types.UniTuple(I8x64, 2)

    def codegen(context, builder, sig, args):
        aty, ary = sig.args[0], args[0]
        lo, hi = _nib_lo_hi(builder, _load(context, builder, aty, ary, args[1], _v64i8))
        y = _load(context, builder, aty, ary, args[2], _v32i8)
        # yy = [y, y >> 2]: byte l of half 0 holds element l's high bits at bits 0-1 and element
        # l+64's at bits 4-5; half 1 the same for elements l+32 and l+96
        yy = _cat(builder, y, builder.lshr(y, _byte_vec(32, 2)))
        h0 = builder.and_(builder.shl(yy, _byte_vec(64, 4)), _byte_vec(64, 0x30))
        h1 = builder.and_(yy, _byte_vec(64, 0x30))
        return context.make_tuple(builder, ret, [builder.or_(lo, h0), builder.or_(hi, h1)])

    return ret(w, ql, qh), codegen


@intrinsic
def q6_k_scales(typingctx, w, o):
    """Q6_K super-block at byte o -> (4 F32x16 per-lane scales of its 64-element groups, F32x16 offsets).

    Group k covers sub-blocks 4k..4k+3: lanes [d*sc_4k]*4 + ... The offsets vector is lane g =
    -32 * d * sc_g (the codes carry +32; multiply by xs).
    """
    if not (_check_1d(w) and isinstance(o, types.Integer)):
        return None
    ret = types.UniTuple(F32x16, 5)

    def codegen(context, builder, sig, args):
        aty, ary, idx = sig.args[0], args[0], args[1]
        sc = builder.sitofp(builder.sext(_load(context, builder, aty, ary, idx, _v16i8, 192), _v16i32), _v16f32)
        f = builder.fmul(sc, _splat(builder, _f16(context, builder, aty, ary, idx, 208), _v16f32))
        out = [builder.shuffle_vector(f, f, _idx(16, [4 * k + j // 4 for j in range(16)])) for k in range(4)]
        out.append(builder.fmul(f, ir.Constant(_v16f32, [-32.0] * 16)))
        return context.make_tuple(builder, ret, out)

    return ret(w, o), codegen


# ---- AMX (Intel Advanced Matrix Extensions, int8) ---------------------------------------
# Tiles are named by immediate numbers (the non-".internal" LLVM intrinsics), so no
# x86_amx values pass through numba. Linux hands out the tile state only after an
# arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) per process: cpu.HAS_AMX.

_void, _i64 = ir.VoidType(), ir.IntType(64)


def _tile_ptr(context, builder, aryty, ary, idx):
    return _ptr_at(context, builder, aryty, ary, idx, _i8)


@intrinsic
def amx_config(typingctx, cfg):
    """ldtilecfg from a 64-byte uint8 array (palette 1 layout); per thread, before any tile op."""
    if not (_check_1d(cfg) and cfg.dtype == types.uint8):
        return None

    def codegen(context, builder, sig, args):
        _call(
            builder,
            "llvm.x86.ldtilecfg",
            _void,
            [_tile_ptr(context, builder, sig.args[0], args[0], ir.Constant(_i64, 0))],
        )
        return context.get_dummy_value()

    return types.none(cfg), codegen


@intrinsic
def amx_release(typingctx):
    def codegen(context, builder, sig, args):
        _call(builder, "llvm.x86.tilerelease", _void, [])
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def f16_strided_f32x16(typingctx, w, o, stride):
    """16 fp16 at bytes o, o + stride, ... o + 15 stride of a uint8 array -> F32x16 (one AVX-512
    dword gather, so only where HAS_AMX; reads 2 bytes past each value: o + 15 stride + 4 must be
    in bounds)."""
    if not (_check_1d(w) and isinstance(o, types.Integer) and isinstance(stride, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        base = _ptr_at(context, builder, sig.args[0], args[0], args[1], _i8)
        st = builder.trunc(args[2], _i32) if args[2].type.width > 32 else args[2]
        idx = builder.mul(_splat(builder, st, _v16i32), ir.Constant(_v16i32, list(range(16))))
        src = ir.Constant(_v16i32, [0] * 16)
        mask = ir.Constant(ir.IntType(16), 0xFFFF)
        g = _call(builder, "llvm.x86.avx512.gather.dpi.512", _v16i32, [src, base, idx, mask, ir.Constant(_i32, 1)])
        h = builder.bitcast(builder.trunc(g, ir.VectorType(_i16, 16)), ir.VectorType(_half, 16))
        return builder.fpext(h, _v16f32)

    return F32x16(w, o, stride), codegen


@intrinsic
def amx_dot1(typingctx, ct, at, bt, a, ao, astride, bp, bo, c, co, ub):
    """c[co:] int32 (rows x 16, row stride 64 bytes) = A . B with int8 tiles: A (tile at, signed)
    from a at ao with row stride astride, B (tile bt, VNNI layout; signed, or unsigned if ub)
    from bp at bo with stride 64, the result in C tile ct (ct, at, bt, ub: constants; shapes
    from amx_config)."""
    ok = _check_1d(a) and _check_1d(bp) and _check_1d(c) and c.dtype == types.int32
    lits = all(isinstance(k, types.IntegerLiteral) for k in (ct, at, bt, ub))
    if not (ok and lits):
        return None
    cti, ati, bti = ct.literal_value, at.literal_value, bt.literal_value
    op = "llvm.x86.tdpbsud" if ub.literal_value else "llvm.x86.tdpbssd"

    def codegen(context, builder, sig, args):
        a_, ao, st, bp_, bo, c_, co = args[3:10]

        def t8(k):
            return ir.Constant(_i8, k)

        st = builder.sext(st, _i64) if st.type.width < 64 else st
        sb = ir.Constant(_i64, 64)
        _call(builder, "llvm.x86.tilezero", _void, [t8(cti)])
        _call(builder, "llvm.x86.tileloadd64", _void, [t8(ati), _tile_ptr(context, builder, sig.args[3], a_, ao), st])
        _call(builder, "llvm.x86.tileloadd64", _void, [t8(bti), _tile_ptr(context, builder, sig.args[6], bp_, bo), sb])
        _call(builder, op, _void, [t8(cti), t8(ati), t8(bti)])
        _call(builder, "llvm.x86.tilestored64", _void, [t8(cti), _tile_ptr(context, builder, sig.args[8], c_, co), sb])
        return context.get_dummy_value()

    return types.none(ct, at, bt, a, ao, astride, bp, bo, c, co, ub), codegen


@intrinsic
def q8_0_vnni16(typingctx, w, o, stride):
    """The Q8_0 block at byte o of 16 rows (row m at o + m * stride) -> the 8 rows of its AMX B tile
    in VNNI layout as 8 I32x16 (row k, lane m = signed codes 4k..4k+3 of row m). Eight dword gathers."""
    if not (_check_1d(w) and isinstance(o, types.Integer) and isinstance(stride, types.Integer)):
        return None
    ret = types.UniTuple(I32x16, 8)

    def codegen(context, builder, sig, args):
        st = builder.trunc(args[2], _i32) if args[2].type.width > 32 else args[2]
        idx = builder.mul(_splat(builder, st, _v16i32), ir.Constant(_v16i32, list(range(16))))
        src = ir.Constant(_v16i32, [0] * 16)
        mask = ir.Constant(ir.IntType(16), 0xFFFF)
        rows = []
        for k in range(8):
            oo = builder.add(args[1], ir.Constant(args[1].type, 2 + 4 * k))
            base = _ptr_at(context, builder, sig.args[0], args[0], oo, _i8)
            rows.append(
                _call(builder, "llvm.x86.avx512.gather.dpi.512", _v16i32, [src, base, idx, mask, ir.Constant(_i32, 1)])
            )
        return context.make_tuple(builder, ret, rows)

    return ret(w, o, stride), codegen


@intrinsic
def q4_0_vnni16(typingctx, w, o, stride):
    """The Q4_0 block at byte o of 16 rows (row m at o + m * stride) -> the 8 rows of its AMX B tile
    in VNNI layout as 8 I32x16 (row k, lane m = codes 4k..4k+3 of row m, unsigned 0..15; rows
    0-3 from the low nibbles, 4-7 from the high ones). Four dword gathers (AVX-512)."""
    if not (_check_1d(w) and isinstance(o, types.Integer) and isinstance(stride, types.Integer)):
        return None
    ret = types.UniTuple(I32x16, 8)

    def codegen(context, builder, sig, args):
        st = builder.trunc(args[2], _i32) if args[2].type.width > 32 else args[2]
        idx = builder.mul(_splat(builder, st, _v16i32), ir.Constant(_v16i32, list(range(16))))
        src = ir.Constant(_v16i32, [0] * 16)
        mask = ir.Constant(ir.IntType(16), 0xFFFF)
        m4 = ir.Constant(_v16i32, [0x0F0F0F0F] * 16)
        lo, hi = [], []
        for k in range(4):
            oo = builder.add(args[1], ir.Constant(args[1].type, 2 + 4 * k))
            base = _ptr_at(context, builder, sig.args[0], args[0], oo, _i8)
            g = _call(builder, "llvm.x86.avx512.gather.dpi.512", _v16i32, [src, base, idx, mask, ir.Constant(_i32, 1)])
            lo.append(builder.and_(g, m4))
            hi.append(builder.and_(builder.lshr(g, ir.Constant(_v16i32, [4] * 16)), m4))
        return context.make_tuple(builder, ret, lo + hi)

    return ret(w, o, stride), codegen


@intrinsic
def scale_acc_f32x16(typingctx, acc, p, dv, dx, nx):
    """acc + dv * (float(p) * dx + nx): one token's tile-result row scaled (dx, nx: float32 scalars)."""
    if not (acc == F32x16 and p == I32x16 and dv == F32x16 and dx == types.float32 and nx == types.float32):
        return None

    def codegen(context, builder, sig, args):
        acc_, p_, dv_, dx_, nx_ = args
        y = _call(
            builder,
            "llvm.fma.v16f32",
            _v16f32,
            [builder.sitofp(p_, _v16f32), _splat(builder, dx_, _v16f32), _splat(builder, nx_, _v16f32)],
        )
        return _call(builder, "llvm.fma.v16f32", _v16f32, [y, dv_, acc_])

    return F32x16(acc, p, dv, dx, nx), codegen


def _gather16(context, builder, aryty, ary, o, off, idx):
    oo = builder.add(o, ir.Constant(o.type, off))
    base = _ptr_at(context, builder, aryty, ary, oo, _i8)
    src = ir.Constant(_v16i32, [0] * 16)
    mask = ir.Constant(ir.IntType(16), 0xFFFF)
    return _call(builder, "llvm.x86.avx512.gather.dpi.512", _v16i32, [src, base, idx, mask, ir.Constant(_i32, 1)])


def _row_idx(builder, stride):
    st = builder.trunc(stride, _i32) if stride.type.width > 32 else stride
    return builder.mul(_splat(builder, st, _v16i32), ir.Constant(_v16i32, list(range(16))))


@intrinsic
def nib_vnni16(typingctx, w, o, stride):
    """32 bytes at byte o of 16 rows (row m at o + m * stride) -> B tile rows (VNNI layout) of the
    32 low nibbles (first 8 I32x16) and of the 32 high nibbles (last 8): Q4_K's sub-block pair."""
    if not (_check_1d(w) and isinstance(o, types.Integer) and isinstance(stride, types.Integer)):
        return None
    ret = types.UniTuple(I32x16, 16)

    def codegen(context, builder, sig, args):
        idx = _row_idx(builder, args[2])
        m4 = ir.Constant(_v16i32, [0x0F0F0F0F] * 16)
        lo, hi = [], []
        for k in range(8):
            g = _gather16(context, builder, sig.args[0], args[0], args[1], 4 * k, idx)
            lo.append(builder.and_(g, m4))
            hi.append(builder.and_(builder.lshr(g, ir.Constant(_v16i32, [4] * 16)), m4))
        return context.make_tuple(builder, ret, lo + hi)

    return ret(w, o, stride), codegen


@intrinsic
def q4_k_scales16(typingctx, w, o, stride):
    """The Q4_K super-block at byte o of 16 rows (row m at o + m * stride) -> 16 F32x16 over the
    rows: d * sc_j for sub-blocks j = 0..7, then dmin * m_j (four dword gathers)."""
    if not (_check_1d(w) and isinstance(o, types.Integer) and isinstance(stride, types.Integer)):
        return None
    ret = types.UniTuple(F32x16, 16)

    def codegen(context, builder, sig, args):
        idx = _row_idx(builder, args[2])
        dd, a, m, md = (_gather16(context, builder, sig.args[0], args[0], args[1], 4 * k, idx) for k in range(4))

        def k32(x):
            return ir.Constant(_v16i32, [x] * 16)

        def half_f32(v):
            return builder.fpext(
                builder.bitcast(builder.trunc(v, ir.VectorType(_i16, 16)), ir.VectorType(_half, 16)), _v16f32
            )

        d = half_f32(dd)
        dmin = half_f32(builder.lshr(dd, k32(16)))
        scs, mns = [], []
        for j in range(4):
            aj = builder.lshr(a, k32(8 * j))
            mj = builder.lshr(m, k32(8 * j))
            mdj = builder.lshr(md, k32(8 * j))
            scs.append(builder.and_(aj, k32(63)))
            mns.append(builder.and_(mj, k32(63)))
        for j in range(4):
            aj = builder.lshr(a, k32(8 * j))
            mj = builder.lshr(m, k32(8 * j))
            mdj = builder.lshr(md, k32(8 * j))
            hi_a = builder.shl(builder.and_(builder.lshr(aj, k32(6)), k32(3)), k32(4))
            hi_m = builder.shl(builder.and_(builder.lshr(mj, k32(6)), k32(3)), k32(4))
            scs.append(builder.or_(builder.and_(mdj, k32(15)), hi_a))
            mns.append(builder.or_(builder.and_(builder.lshr(mdj, k32(4)), k32(15)), hi_m))
        out = [builder.fmul(builder.sitofp(v, _v16f32), d) for v in scs]
        out += [builder.fmul(builder.sitofp(v, _v16f32), dmin) for v in mns]
        return context.make_tuple(builder, ret, out)

    return ret(w, o, stride), codegen


@intrinsic
def scale_acc_min_f32x16(typingctx, acc, p, dv, dx, mv, nx):
    """acc + dv * (float(p) * dx) + mv * nx (dx, nx: float32 scalars): a K-quant sub-block's
    tile-result row with its scale dv and min mv."""
    ok = acc == F32x16 and p == I32x16 and dv == F32x16 and mv == F32x16
    if not (ok and dx == types.float32 and nx == types.float32):
        return None

    def codegen(context, builder, sig, args):
        acc_, p_, dv_, dx_, mv_, nx_ = args
        y = builder.fmul(builder.sitofp(p_, _v16f32), _splat(builder, dx_, _v16f32))
        acc_ = _call(builder, "llvm.fma.v16f32", _v16f32, [y, dv_, acc_])
        return _call(builder, "llvm.fma.v16f32", _v16f32, [mv_, _splat(builder, nx_, _v16f32), acc_])

    return F32x16(acc, p, dv, dx, mv, nx), codegen


F32x16x16 = types.UniTuple(F32x16, 16)


@intrinsic
def zeros_f32x16x16(typingctx):
    """16 zero F32x16: the register-held accumulators of one AMX C tile's 16 token rows (scale_acc16)."""

    def codegen(context, builder, sig, args):
        z = ir.Constant(_v16f32, [0.0] * 16)
        return context.make_tuple(builder, F32x16x16, [z] * 16)

    return F32x16x16(), codegen


@intrinsic
def store_f32x16x16(typingctx, ary, idx, accs):
    """ary[idx + 16 j : idx + 16 j + 16] = accs[j] for j = 0..15 (a 1-D C float32 array)."""
    if not (_check_1d(ary) and ary.dtype == types.float32 and isinstance(idx, types.Integer) and accs == F32x16x16):
        return None

    def codegen(context, builder, sig, args):
        ary_, idx_, accs_ = args
        for j in range(16):
            i = builder.add(idx_, ir.Constant(idx_.type, 16 * j))
            builder.store(
                builder.extract_value(accs_, j), _ptr_at(context, builder, sig.args[0], ary_, i, _v16f32), align=4
            )
        return context.get_dummy_value()

    return types.none(ary, idx, accs), codegen


@intrinsic
def scale_acc16(typingctx, accs, c, co, dv, dxs, ko, mv, nxs):
    """A whole C tile's result scaled into register-held accumulators: for token rows j = 0..15 (p_j = float(c[co +
    16 j : +16]), dx_j = dxs[ko + j], nx_j = nxs[ko + j]), accs[j] + dv * (p_j * dx_j) + mv * nx_j where mv is an
    F32x16 (K-quant mins), accs[j] + dv * (p_j * dx_j + nx_j) where mv is None (Q4_0's -8 offset), and accs[j] + dv
    * (p_j * dx_j) where nxs is None too (Q8_0). The 16 tokens' terms are contiguous (16 floats at ko); rows past
    the tile's token count must have dx 0 (and nx 0). Per row a convert, two float ops (three with mins), against
    _post's loads and stores of an accumulator in memory."""
    with_min = mv == F32x16
    with_nx = not isinstance(nxs, types.NoneType)
    ok = accs == F32x16x16 and _check_1d(c) and c.dtype == types.int32 and dv == F32x16
    ok = ok and _check_1d(dxs) and dxs.dtype == types.float32 and isinstance(co, types.Integer)
    ok = ok and isinstance(ko, types.Integer) and (with_min or isinstance(mv, types.NoneType))
    ok = ok and (not with_nx or (_check_1d(nxs) and nxs.dtype == types.float32)) and (with_nx or not with_min)
    if not ok:
        return None

    def codegen(context, builder, sig, args):
        accs_, c_, co_, dv_, dxs_, ko_, mv_, nxs_ = args
        fma = "llvm.fma.v16f32"
        out = []
        for j in range(16):
            ci = builder.add(co_, ir.Constant(co_.type, 16 * j))
            p = builder.sitofp(builder.load(_ptr_at(context, builder, sig.args[1], c_, ci, _v16i32), align=4), _v16f32)
            ki = builder.add(ko_, ir.Constant(ko_.type, j))
            dx = _splat(builder, builder.load(_ptr_at(context, builder, sig.args[4], dxs_, ki, _f32), align=4), _v16f32)
            nx = None
            if with_nx:
                nx = _splat(
                    builder, builder.load(_ptr_at(context, builder, sig.args[7], nxs_, ki, _f32), align=4), _v16f32
                )
            y = _call(builder, fma, _v16f32, [p, dx, nx]) if (with_nx and not with_min) else builder.fmul(p, dx)
            a = _call(builder, fma, _v16f32, [y, dv_, builder.extract_value(accs_, j)])
            if with_min:
                a = _call(builder, fma, _v16f32, [mv_, nx, a])
            out.append(a)
        return context.make_tuple(builder, F32x16x16, out)

    return F32x16x16(accs, c, co, dv, dxs, ko, mv, nxs), codegen


@intrinsic
def scale_acc16_pair(typingctx, accs, c, co, dv0, dv1, dxs, ko):
    """scale_acc16 for a block whose two 16-element halves have their own row scales (Q6_K) and share the token's
    activation scale: accs[j] + (p0_j * dv0 + p1_j * dv1) * dx_j, p0_j = float(c[co + 16 j : +16]) (the first
    half's dot), p1_j = float(c[co + 256 + 16 j : +16]) (the second's), dx_j = dxs[ko + j]. Per row two converts and
    three float ops, one activation scale (two scale_acc16 with the offset term: two converts, four float ops, two
    scales and two terms)."""
    ok = accs == F32x16x16 and _check_1d(c) and c.dtype == types.int32 and dv0 == F32x16 and dv1 == F32x16
    ok = ok and _check_1d(dxs) and dxs.dtype == types.float32 and isinstance(co, types.Integer)
    if not (ok and isinstance(ko, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        accs_, c_, co_, dv0_, dv1_, dxs_, ko_ = args
        fma = "llvm.fma.v16f32"
        out = []
        for j in range(16):
            p = []
            for h in range(2):
                ci = builder.add(co_, ir.Constant(co_.type, 256 * h + 16 * j))
                v = builder.load(_ptr_at(context, builder, sig.args[1], c_, ci, _v16i32), align=4)
                p.append(builder.sitofp(v, _v16f32))
            ki = builder.add(ko_, ir.Constant(ko_.type, j))
            dx = _splat(builder, builder.load(_ptr_at(context, builder, sig.args[5], dxs_, ki, _f32), align=4), _v16f32)
            y = _call(builder, fma, _v16f32, [p[1], dv1_, builder.fmul(p[0], dv0_)])
            out.append(_call(builder, fma, _v16f32, [y, dx, builder.extract_value(accs_, j)]))
        return context.make_tuple(builder, F32x16x16, out)

    return F32x16x16(accs, c, co, dv0, dv1, dxs, ko), codegen


@intrinsic
def sub_u8_i32x16(typingctx, v, k):
    """Each of the 64 bytes of v minus the constant k, wrapping (vpsubb): Q6_K's codes 0..63 to the signed
    -32..31 of an AMX B tile (tdpbssd), so the -32 needs no activation term."""
    if not (v == I32x16 and isinstance(k, types.IntegerLiteral)):
        return None
    kv = k.literal_value

    def codegen(context, builder, sig, args):
        b = builder.bitcast(args[0], _v64i8)
        return builder.bitcast(builder.sub(b, ir.Constant(_v64i8, [kv & 0xFF] * 64)), _v16i32)

    return I32x16(v, k), codegen


@intrinsic
def amx_dot2(typingctx, clo, chi, at, bt, a, ao, astride, bp, bo, c, co, ub):
    """Two K = 16 dots of one 32-element block, each 16-element half into its own C tile (a K-quant whose scales
    are per 16 elements: Q6_K): C tile clo = A (a at ao, row stride astride) . B (bp at bo, stride 64), then C tile
    chi = A (a at ao + 16) . B (bp at bo + 64 int32: the block's B tile rows 4-7); results stored at c[co:] and
    c[co + 256:] (int32, row stride 64 bytes). Tiles at / bt are loaded twice (clo, chi, at, bt, ub: constants; the
    A tile 16 bytes wide and the B tile 4 rows, from amx_config)."""
    ok = _check_1d(a) and _check_1d(bp) and bp.dtype == types.int32 and _check_1d(c) and c.dtype == types.int32
    lits = all(isinstance(k, types.IntegerLiteral) for k in (clo, chi, at, bt, ub))
    if not (ok and lits):
        return None
    tiles = [k.literal_value for k in (clo, chi, at, bt)]
    op = "llvm.x86.tdpbsud" if ub.literal_value else "llvm.x86.tdpbssd"

    def codegen(context, builder, sig, args):
        a_, ao, st, bp_, bo, c_, co = args[4:11]
        t_lo, t_hi, t_a, t_b = (ir.Constant(_i8, k) for k in tiles)
        st = builder.sext(st, _i64) if st.type.width < 64 else st
        sb = ir.Constant(_i64, 64)
        for half, ct in ((0, t_lo), (1, t_hi)):
            aoh = builder.add(ao, ir.Constant(ao.type, 16 * half))
            boh = builder.add(bo, ir.Constant(bo.type, 64 * half))
            _call(builder, "llvm.x86.tilezero", _void, [ct])
            _call(builder, "llvm.x86.tileloadd64", _void, [t_a, _tile_ptr(context, builder, sig.args[4], a_, aoh), st])
            _call(builder, "llvm.x86.tileloadd64", _void, [t_b, _tile_ptr(context, builder, sig.args[7], bp_, boh), sb])
            _call(builder, op, _void, [ct, t_a, t_b])
        for half, ct in ((0, t_lo), (1, t_hi)):
            coh = builder.add(co, ir.Constant(co.type, 256 * half))
            _call(builder, "llvm.x86.tilestored64", _void, [ct, _tile_ptr(context, builder, sig.args[9], c_, coh), sb])
        return context.get_dummy_value()

    return types.none(clo, chi, at, bt, a, ao, astride, bp, bo, c, co, ub), codegen


def _int_as(builder, v, ty):
    """Integer v sign-extended or truncated to the integer type ty."""
    if v.type.width < ty.width:
        return builder.sext(v, ty)
    return builder.trunc(v, ty) if v.type.width > ty.width else v


@intrinsic
def load_rows_f32x16x16(typingctx, ary, idx, stride):
    """16 F32x16 from ary[idx + stride * j : + 16] for j = 0..15 (a 1-D C float32 array): partial sums of one
    (16 tokens, 16 rows) tile of a (T, N) output, row stride N, taken up again (K-blocked AMX tiles)."""
    ok = _check_1d(ary) and ary.dtype == types.float32
    if not (ok and isinstance(idx, types.Integer) and isinstance(stride, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        ary_, idx_, st = args
        st = _int_as(builder, st, idx_.type)
        out = []
        for j in range(16):
            i = builder.add(idx_, builder.mul(st, ir.Constant(idx_.type, j)))
            out.append(builder.load(_ptr_at(context, builder, sig.args[0], ary_, i, _v16f32), align=4))
        return context.make_tuple(builder, F32x16x16, out)

    return F32x16x16(ary, idx, stride), codegen


@intrinsic
def store_rows_f32x16x16(typingctx, ary, idx, stride, accs):
    """ary[idx + stride * j : + 16] = accs[j] for j = 0..15 (a 1-D C float32 array): load_rows_f32x16x16's store."""
    ok = _check_1d(ary) and ary.dtype == types.float32 and accs == F32x16x16
    if not (ok and isinstance(idx, types.Integer) and isinstance(stride, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        ary_, idx_, st, accs_ = args
        st = _int_as(builder, st, idx_.type)
        for j in range(16):
            i = builder.add(idx_, builder.mul(st, ir.Constant(idx_.type, j)))
            builder.store(
                builder.extract_value(accs_, j), _ptr_at(context, builder, sig.args[0], ary_, i, _v16f32), align=4
            )
        return context.get_dummy_value()

    return types.none(ary, idx, stride, accs), codegen
