"""SIMD pieces of the 16-row interleaved IQ4_NL / IQ4_XS kernels (gemm_r16_iq4): the code book lookup
on 64 nibbles at once, and the 16 rows' 16-bit IQ4_XS high scale bits.

`lut_iq4_i8x64(v)` maps 64 nibbles (0..15) to KVALUES_IQ4NL + 128 (1..241, unsigned bytes) so the
unsigned x signed dot (vpdpbusd) takes them; the kernel subtracts 128 * the activation code sum.
AVX-512 BW: one 512-bit `vpshufb` (the table in each 128-bit lane); AVX2: two 256-bit ones; without
AVX2 a chain of 16 vector selects (qdot_iq._select_lut).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from modelc.kernels import qdot_k as qk
from modelc.kernels.cpu import HAS_AVX2, HAS_AVX512_VNNI
from modelc.kernels.iq_tables import KVALUES_IQ4NL
from modelc.kernels.qdot import _call, _v32i8
from modelc.kernels.qdot_iq import _select_lut
from modelc.kernels.qdot_tile import I8x64, I32x16, _check_1d, _load

_i8, _i16, _i32 = ir.IntType(8), ir.IntType(16), ir.IntType(32)
_v64i8 = ir.VectorType(_i8, 64)
CODE_OFFSET = 128
"""What the lookup adds to each code book value: the kernel starts each block dot at -128 * sum(x codes)."""
_VALS = [(int(v) + CODE_OFFSET) & 0xFF for v in KVALUES_IQ4NL]


@intrinsic
def lut_iq4_i8x64(typingctx, v):
    """Per byte: KVALUES_IQ4NL[v] + 128 (v: nibbles 0..15; result 1..241 as unsigned bytes)."""
    if v != I8x64:
        return None

    def codegen(context, builder, sig, args):
        nib = args[0]
        if HAS_AVX512_VNNI:  # avx512bw
            return _call(builder, "llvm.x86.avx512.pshuf.b.512", _v64i8, [ir.Constant(_v64i8, _VALS * 4), nib])
        if HAS_AVX2:
            tab = ir.Constant(_v32i8, _VALS * 2)
            lo = _call(builder, "llvm.x86.avx2.pshuf.b", _v32i8, [tab, qk._shuffle(builder, nib, nib, range(32))])
            hi = _call(builder, "llvm.x86.avx2.pshuf.b", _v32i8, [tab, qk._shuffle(builder, nib, nib, range(32, 64))])
            return qk._shuffle(builder, lo, hi, range(64))
        return _select_lut(builder, nib, _VALS, _v64i8)

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
