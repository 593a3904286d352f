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

from modelc.kernels.iq_tables import KVALUES_IQ4NL, KVALUES_MXFP4
from modelc.kernels.qdot import HAS_AVX2, I8x32, _call, _check_1d, _i8, _i32, _ptr_at, _v32i8

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
    out = ir.Constant(_v32i8, [vals[0]] * 32)
    for k in range(1, 16):
        hit = builder.icmp_unsigned("==", nib, ir.Constant(_v32i8, [k] * 32))
        out = builder.select(hit, ir.Constant(_v32i8, [vals[k]] * 32), out)
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
