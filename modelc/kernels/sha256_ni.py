"""SHA-256 on the x86 SHA extensions (SHA-NI), one or two independent messages per loop.

Owns `Sha256` (an incremental hash with hashlib's update/digest/hexdigest) and
`update_pair(h1, data1, h2, data2)`, which feeds two hashes at once. The block function
is an llvmlite intrinsic (`llvm.x86.sha256rnds2/msg1/msg2` plus shuffles). One message
cannot go faster than the latency chain of sha256rnds2 (two rounds per instruction, each
waiting for the previous): hashlib/OpenSSL sits at that bound (~1.3 GB/s at 2.1 GHz), and
so does one lane here. Two independent messages interleaved in one loop use the idle
cycles, but on this Xeon the pair runs at only ~1.3x one lane (1.71 vs 1.32 GB/s, best of 5
on 64 MiB): the SHA instructions' own throughput is the limit (dropping the pshufd/palignr
shuffles, which gives wrong digests, changes nothing). So a pair costs ~0.77x of hashing
the two one after the other.

NOTE: the artifact writer does not use this: numba's import and first compiled call cost
~1 s of CPU per process (0.35-0.5 s import, 0.6 s first cached call, load ~5), more than
pairing saves on a 1 GiB pack (~0.2 CPU-s per GiB paired); hash_pool.py uses hashlib.

Without SHA-NI (`llvmlite.binding.get_host_cpu_features()["sha"]` false) or with
MODELC_NO_SHANI set, `Sha256` wraps hashlib and `update_pair` feeds the two one after the
other. The reference twin is hashlib itself (the tests compare digests).

State layout inside the kernel: the uint32[8] state holds the two SHA-NI vectors
[F, E, B, A] and [H, G, D, C] (the ABEF/CDGH register order), converted once at start
and finish.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import llvmlite.binding as llb
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic


def _host_has_shani() -> bool:
    if os.environ.get("MODELC_NO_SHANI"):
        return False
    try:
        feats = llb.get_host_cpu_features()
    except RuntimeError:  # features not reported on this host
        return False
    return bool(feats.get("sha")) and bool(feats.get("ssse3")) and bool(feats.get("sse4.1"))


HAS_SHANI = _host_has_shani()
"""True when Sha256 runs on the SHA-NI kernel; False: hashlib."""


def _round_constants() -> list[int]:
    """K[i]: the first 32 bits of the fractional part of the cube root of the i-th prime."""
    primes: list[int] = []
    n = 2
    while len(primes) < 64:
        if all(n % p for p in primes):
            primes.append(n)
        n += 1
    out = []
    for p in primes:
        x = p << 96  # floor(cbrt(p * 2**96)) = floor(cbrt(p) * 2**32)
        r = 1 << ((x.bit_length() + 2) // 3)
        while True:  # integer Newton from above
            s = (2 * r + x // (r * r)) // 3
            if s >= r:
                break
            r = s
        while r**3 > x:
            r -= 1
        out.append(r & 0xFFFFFFFF)
    return out


_K = _round_constants()
_IV = [0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19]
_TO_NI = [5, 4, 1, 0, 7, 6, 3, 2]  # ni[j] = standard[_TO_NI[j]] ([F,E,B,A], [H,G,D,C])

_i8, _i32, _i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
_v4i32, _v16i8 = ir.VectorType(_i32, 4), ir.VectorType(_i8, 16)


def _call(builder, name: str, args: list) -> Any:
    fnty = ir.FunctionType(_v4i32, [a.type for a in args])
    return builder.call(cgutils.get_or_insert_function(builder.module, fnty, name), args)


def _shuf(builder, a, b, idx: list[int]) -> Any:
    return builder.shuffle_vector(a, b, ir.Constant(_v4i32, idx))


def _rounds(builder, lanes: list[list], block_ptrs: list) -> None:
    """64 rounds on each lane's (abef, cdgh) pair, in place; the lanes' instructions interleaved."""
    bswap = ir.Constant(ir.VectorType(_i32, 16), [3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12])
    msgs: list[list] = [[None] * 4 for _ in lanes]
    for g in range(16):  # rounds 4g .. 4g+3
        for st, m, p in zip(lanes, msgs, block_ptrs, strict=True):
            if g < 4:
                raw = builder.load(
                    builder.bitcast(builder.gep(p, [ir.Constant(_i64, 16 * g)]), _v16i8.as_pointer()), align=1
                )
                m[g] = builder.bitcast(builder.shuffle_vector(raw, raw, bswap), _v4i32)
            wk = builder.add(m[g % 4], ir.Constant(_v4i32, _K[4 * g : 4 * g + 4]))
            st[1] = _call(builder, "llvm.x86.sha256rnds2", [st[1], st[0], wk])  # cdgh -> new abef
            if 3 <= g < 15:  # finish W[4g+4 .. 4g+7]
                w7 = _shuf(builder, m[(g - 1) % 4], m[g % 4], [1, 2, 3, 4])
                m[(g + 1) % 4] = _call(builder, "llvm.x86.sha256msg2", [builder.add(m[(g + 1) % 4], w7), m[g % 4]])
            wk = _shuf(builder, wk, wk, [2, 3, 0, 0])
            st[0] = _call(builder, "llvm.x86.sha256rnds2", [st[0], st[1], wk])
            if 1 <= g < 13:  # start W[4g+12 .. 4g+15]
                m[(g - 1) % 4] = _call(builder, "llvm.x86.sha256msg1", [m[(g - 1) % 4], m[g % 4]])
    # After an even number of rnds2 the roles are back: st[0] = abef, st[1] = cdgh.


def _emit_blocks(context, builder, sig, args, num_lanes: int) -> None:
    """Codegen of compress*(state, data, start, ..., nblocks): a loop over nblocks, state in registers."""
    nblocks = args[-1]
    states, datas = [], []
    for ln in range(num_lanes):
        st_ty, d_ty = sig.args[3 * ln], sig.args[3 * ln + 1]
        st = context.make_array(st_ty)(context, builder, args[3 * ln]).data
        d = context.make_array(d_ty)(context, builder, args[3 * ln + 1]).data
        states.append(builder.bitcast(st, _v4i32.as_pointer()))
        datas.append(builder.gep(builder.bitcast(d, _i8.as_pointer()), [args[3 * ln + 2]]))
    init = [[builder.load(s, align=4), builder.load(builder.gep(s, [ir.Constant(_i32, 1)]), align=4)] for s in states]
    entry = builder.block
    loop = builder.append_basic_block("sha_loop")
    done = builder.append_basic_block("sha_done")
    nb = builder.sext(nblocks, _i64) if nblocks.type.width < 64 else nblocks
    builder.cbranch(builder.icmp_signed(">", nb, ir.Constant(_i64, 0)), loop, done)
    builder.position_at_end(loop)
    i = builder.phi(_i64)
    i.add_incoming(ir.Constant(_i64, 0), entry)
    phis = [[builder.phi(_v4i32), builder.phi(_v4i32)] for _ in range(num_lanes)]
    for ph, ini in zip(phis, init, strict=True):
        for p, v in zip(ph, ini, strict=True):
            p.add_incoming(v, entry)
    cur = [list(ph) for ph in phis]
    off = builder.mul(i, ir.Constant(_i64, 64))
    _rounds(builder, cur, [builder.gep(d, [off]) for d in datas])
    new = [[builder.add(c[0], ph[0]), builder.add(c[1], ph[1])] for c, ph in zip(cur, phis, strict=True)]
    i_next = builder.add(i, ir.Constant(_i64, 1))
    last = builder.block
    i.add_incoming(i_next, last)
    for ph, nw in zip(phis, new, strict=True):
        for p, v in zip(ph, nw, strict=True):
            p.add_incoming(v, last)
    builder.cbranch(builder.icmp_signed("<", i_next, nb), loop, done)
    builder.position_at_end(done)
    outs = []
    for ini, nw in zip(init, new, strict=True):  # every phi first: LLVM wants them at the top of the block
        for k in range(2):
            out = builder.phi(_v4i32)
            out.add_incoming(ini[k], entry)
            out.add_incoming(nw[k], last)
            outs.append(out)
    for j, out in enumerate(outs):
        builder.store(out, builder.gep(states[j // 2], [ir.Constant(_i32, j % 2)]), align=4)


def _is_u32(a) -> bool:
    return isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C" and a.dtype == types.uint32


def _is_u8(a) -> bool:
    return isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C" and a.dtype == types.uint8


@intrinsic
def _compress1(typingctx, state, data, start, nblocks):
    """nblocks 64-byte blocks of data[start:] into state (uint32[8], SHA-NI order); no bounds checks."""
    if not (
        _is_u32(state) and _is_u8(data) and isinstance(start, types.Integer) and isinstance(nblocks, types.Integer)
    ):
        return None

    def codegen(context, builder, sig, args):
        _emit_blocks(context, builder, sig, args, 1)
        return context.get_dummy_value()

    return types.void(state, data, types.intp, types.intp), codegen


@intrinsic
def _compress2(typingctx, state_a, data_a, start_a, state_b, data_b, start_b, nblocks):
    """_compress1 on two independent messages, interleaved in one loop."""
    ok = _is_u32(state_a) and _is_u8(data_a) and _is_u32(state_b) and _is_u8(data_b)
    if not (ok and isinstance(nblocks, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        _emit_blocks(context, builder, sig, args, 2)
        return context.get_dummy_value()

    return types.void(state_a, data_a, types.intp, state_b, data_b, types.intp, types.intp), codegen


@njit(cache=True, nogil=True)
def compress_blocks(state, data, start, nblocks):
    """state (8,) u32 <- nblocks blocks of data (N,) u8 from byte `start` (caller checks the bounds)."""
    _compress1(state, data, start, nblocks)


@njit(cache=True, nogil=True)
def compress_blocks2(state_a, data_a, start_a, state_b, data_b, start_b, nblocks):
    """compress_blocks on two messages at once (nblocks blocks of each)."""
    _compress2(state_a, data_a, start_a, state_b, data_b, start_b, nblocks)


def _as_bytes(data: Any) -> np.ndarray:
    """A (N,) uint8 view of any contiguous buffer (bytes, mmap, memoryview, numpy array)."""
    if isinstance(data, np.ndarray):
        return np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    return np.frombuffer(data, dtype=np.uint8)


class Sha256:
    """Incremental SHA-256: update(data), digest(), hexdigest() (hashlib's, without SHA-NI)."""

    __slots__ = ("_fallback", "_state", "_tail", "_length")
    name = "sha256"

    def __init__(self, data: Any = b"") -> None:
        self._fallback = None if HAS_SHANI else hashlib.sha256()
        self._state = np.array([_IV[j] for j in _TO_NI], dtype=np.uint32)  # (8,)
        self._tail = b""  # bytes of the current, incomplete block
        self._length = 0
        self.update(data)

    def update(self, data: Any) -> None:
        update_pair(self, data, None, b"")

    def digest(self) -> bytes:
        if self._fallback is not None:
            return self._fallback.digest()
        state = self._state.copy()
        pad = self._tail + b"\x80" + b"\0" * ((55 - len(self._tail)) % 64) + (self._length * 8).to_bytes(8, "big")
        compress_blocks(state, np.frombuffer(pad, np.uint8), 0, len(pad) // 64)
        std = np.empty(8, np.uint32)
        std[_TO_NI] = state
        return std.astype(">u4").tobytes()

    def hexdigest(self) -> str:
        return self.digest().hex()

    def _head(self, buf: np.ndarray) -> np.ndarray:
        """Complete a pending partial block from buf; returns what is left of buf."""
        if not self._tail or not buf.size:
            return buf
        take = min(64 - len(self._tail), buf.size)
        self._tail += buf[:take].tobytes()
        if len(self._tail) == 64:
            compress_blocks(self._state, np.frombuffer(self._tail, np.uint8), 0, 1)
            self._tail = b""
        return buf[take:]


def update_pair(a: Sha256, data_a: Any, b: Sha256 | None, data_b: Any) -> None:
    """a.update(data_a) and b.update(data_b) (b may be None), the common length hashed two at a time.

    Releases the GIL while hashing (numba nogil / hashlib), so other threads run meanwhile.
    """
    if a._fallback is not None or (b is not None and b._fallback is not None):
        _update_fallback(a, data_a)
        if b is not None:
            _update_fallback(b, data_b)
        return
    bufs = []
    for h, data in ((a, data_a), (b, data_b)):
        if h is None:
            bufs.append(np.zeros(0, np.uint8))
            continue
        buf = _as_bytes(data)
        h._length += buf.size
        bufs.append(h._head(buf))
    ba, bb = bufs
    na, nb = ba.size // 64, bb.size // 64
    both = min(na, nb)
    if both:
        assert b is not None
        compress_blocks2(a._state, ba, 0, b._state, bb, 0, both)
    if na > both:
        compress_blocks(a._state, ba, both * 64, na - both)
    if nb > both:
        assert b is not None
        compress_blocks(b._state, bb, both * 64, nb - both)
    for h, buf, n in ((a, ba, na), (b, bb, nb)):
        if h is not None and buf.size > n * 64:
            h._tail += buf[n * 64 :].tobytes()


def _update_fallback(h: Sha256, data: Any) -> None:
    if h._fallback is None:  # a SHA-NI hash paired with a fallback one (only when mixed on purpose)
        update_pair(h, data, None, b"")
        return
    h._fallback.update(data if not isinstance(data, np.ndarray) else memoryview(_as_bytes(data)))
