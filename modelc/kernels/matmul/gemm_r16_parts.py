"""The pieces gemm_r16, gemm_r16_iq4 and gemm_r16_q6k share: the 16-row group, how many tokens a loop takes at
once and how far ahead it prefetches, the block dots against broadcast activation bytes, the code-sum offsets.

gemm_r16's docstring describes the layout these read.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from modelc.kernels.runtime.cpu import PREFETCH_L2, PREFETCH_T1
from modelc.kernels.simd.qdot import prefetch, prefetch_l2
from modelc.kernels.simd.qdot_r16 import add_i32x16, bcast4_i8x64, bits_i32x16, or_shl_i32x16, splat_i32x16
from modelc.kernels.simd.qdot_tile import (
    WIDE_DOT_EXACT,
    dot4_u6_u8x64,
    dot8_u4_u8x64,
    dot_u8x64,
    load_i8x64,
    sdot_i8x64,
)

SIGNED_DOT = not WIDE_DOT_EXACT
"""AVX2 without VNNI: Q8_0's codes and IQ4's code book values stay signed and each dot takes |w| x (x * sign(w))
(qdot_tile.sdot_i8x64, 2 ops more a ymm half); elsewhere they go in as value + 128 (vpdpbusd, one op, exact
only with VNNI or the portable IR: cpu.WIDE_DOT_EXACT) with a -128 * sum(x) start."""
GROUP = 16
TOKEN_CHUNK = 64
"""The many-token loops take a group's tokens TOKEN_CHUNK at a time (each chunk reads the group's weights again,
from L2): with all T tokens in one pass, a token loop of a block touches T activation lines and T accumulator
lines, and past ~64 tokens they no longer stayed in L1. Emerald Rapids, 2 threads, both forms alternating in one
process, weights streamed, same bits: Q4_0 T = 128 / 256 +19-42% / +33-37%, Q8_0 +25-40% / +28-44%, Q4_K T = 128
-5..+29%, Q6_K +5-15% / +8-14% (5632 x 2048 and 2048 x 5632); T <= 64 is one chunk, as before."""
PREFETCH_BYTES = 8192
"""How far ahead of the block being read the kernel prefetches, one line at a time (a group's
blocks are one contiguous stretch; see gemm_fused_k for why software prefetch matters here).
At T = 4..16 this prefetch is worth 15-30%. The one-token loops of Q4_0, Q8_0, Q4_K and Q6_K prefetch only
where cpu.PREFETCH_T1 (every AVX2 CPU but Zen 4's AVX-512 kernels), because the CPUs measured disagree:
- Zen 4 (AVX-512), TinyLlama's matrices, 2 threads: the hardware prefetcher alone streamed more (Q4_K
  17-26 against 16-18 GB/s; Q4_0, Q8_0 and IQ4_XS ~5-15% more);
- Zen 3 (AVX2), same matrices, 3 alternations (benchmarks/r16_kernels.py, stream): with the prefetch Q4_0
  2048 x 5632 read 22-28 against 19-21 GB/s and 32000 x 2048 27-31 against 19-24, Q4_K 19-21 against 16-20;
  TinyLlama Q4_0 decode (compare_llamacpp, 3 alternations) 41.1-43.1 against 35.7-39.2 tok/s; Q4_K_M decode
  did not move (30.3 against 30.5, median of the bests); Q6_K moved nothing;
- Emerald Rapids (AVX-512, AMX), both variants alternating in one process, streamed: Q4_0 21.9 -> 27.7,
  Q4_K 18.5 -> 24.7, Q8_0 30.2 -> 32.0, Q6_K 17.4 -> 28.1 GB/s (2048 x 5632; Q6_K 4, 8 and 16 KiB ahead
  alike).
IQ4's one-token loop prefetches only with AVX-512 (gemm_r16_iq4.PREFETCH_T1_IQ4: on Zen 3 it read less with it).
Super-blocks of 2 KiB and more (Q4_K, IQ4_XS, Q6_K's many-token loop) are prefetched a part at a time (512,
256, 768 bytes), just ahead of the part being read, not in one burst when the super-block (Q6_K: a half) starts:
a burst of 24-36 lines likely waits for line fill buffers with the vector work queued behind it (this VM has
no counters to show it). Emerald Rapids, both forms alternating in one process, streamed, 5632 x 2048 and
2048 x 5632: Q4_K T = 8 97 -> 131 and 102 -> 130 GB/s effective, T = 16 +23-25%, T = 1 +8%, the AVX2 path
(MODELC_NO_AVX512/VNNI/AMX) T = 8 +18%; IQ4_XS T = 8 +24-27%, T = 1 +8-9%; Q6_K (768 bytes, was 1536) T = 8
+6-9%, T = 16 +7%, AVX2 path T = 8 +9%. Q6_K's one-token loop (a 3360-byte super-block) read the same either
way on TinyLlama's shapes (0-3%) and kept its burst until an 8B's showed the burst's cost: in cache its matrices
ran at 27-35 GB/s with the burst against 35-42 a part at a time (512 bytes: the scale header, then each run of
codes), streamed the same or more (output head 17.4 -> 19.8 GB/s; docs/benchmarks.md, issue 42, 2026-12-07
afternoon)."""


@njit(cache=True, nogil=True, inline="always")
def _ahead(rf, pf, limit):
    """Prefetch the lines from pf up to limit, one at a time; returns the next line to prefetch."""
    while pf < limit:
        prefetch(rf, pf)
        pf += 64
    return pf


@njit(cache=True, nogil=True, inline="always")
def _ahead_t1(rf, pf, limit):
    """The one-token loops' _ahead: into L2 (prefetcht1) where cpu.PREFETCH_L2, into every level where only
    cpu.PREFETCH_T1, none elsewhere (pf comes back unchanged)."""
    if PREFETCH_L2:
        while pf < limit:
            prefetch_l2(rf, pf)
            pf += 64
    elif PREFETCH_T1:
        pf = _ahead(rf, pf, limit)
    return pf


@njit(cache=True, nogil=True, inline="always")
def pairs_t1(groups):
    """The one-token loops' prange steps over `groups` 16-row groups: two neighbouring groups a step, read
    together, one block (Q6_K: super-block) of each in turn (the last group alone where the count is odd): two
    streams through memory a core instead of one. Q4_0, Q4_1, Q8_0 and Q6_K (gemm_r16.PAIRED_T1). Emerald Rapids,
    2 threads, an 8B's matrices streamed, the forms alternating in one process (medians of 8-10, GB/s, against one
    group a step with the L2 prefetch): Q8_0 28672 x 4096 22.2 -> 23.7, 4096 x 14336 18.9-20.1 -> 21.0-22.5 (four
    groups a step read as two); Q6_K 4096 x 14336 16.0 -> 17.7, 128256 x 4096 17.1 -> 18.1; three jobs, Q4_0
    28672 x 4096 +1/+5/+22%, 4096 x 14336 +4/+8/+14%, 14336 x 4096 +3/+3/+5%, 4096 x 4096 -1..+2%; Q4_1 -2..+4% on
    the same shapes in two jobs, +4-16% in the third; TinyLlama's shapes -6..+8%; in cache the same within the
    noise. Q4_K's super-blocks read in pairs streamed 12-18% slower on 28672 x 4096 (its one-token loop keeps one
    group a step), and MoE's whole-expert loops (moe_ffn._r16_rows) read Q4_K and Q6_K experts 9% and 6-8% slower
    in pairs (they keep one group a step). A kernel reading the same bytes with one dot a line and no other work
    streamed no faster than Q8_0's pairs (23.2 against 23.7 GB/s, numpy's 2-thread probe 25.2), but 9-19% faster
    than Q4_0's and Q4_1's pairs (85-96% of the probe against their 72-82%: the reads alone do not bound those)."""
    return (groups + 1) // 2


@njit(cache=True, nogil=True, inline="always")
def steps(groups, t):
    """The prange steps of a kernel over `groups` 16-row groups at t tokens: pairs_t1 at one token, else one group
    a step."""
    return pairs_t1(groups) if t == 1 else groups


@njit(cache=True, nogil=True, inline="always")
def _store_acc(out, acc, gi, t):
    """out[j, 16 gi .. 16 gi + 15] = acc[16 j .. 16 j + 15] for the t tokens (a group's f32 scratch)."""
    r0 = gi * 16
    for j in range(t):
        for r in range(16):
            out[j, r0 + r] = acc[j * 16 + r]


@njit(cache=True, nogil=True, inline="always")
def _load8(rf, q):
    """The 8 consecutive 64-byte chunks at byte q of rf."""
    return (load_i8x64(rf, q), load_i8x64(rf, q + 64), load_i8x64(rf, q + 128), load_i8x64(rf, q + 192),
            load_i8x64(rf, q + 256), load_i8x64(rf, q + 320), load_i8x64(rf, q + 384), load_i8x64(rf, q + 448))  # fmt: skip


@njit(cache=True, nogil=True, inline="always")
def _dot1(p, u, xq, xo, signed):
    """p + the dot of chunk u (each lane a row's 4 codes) with activation bytes xo..xo+3 broadcast: u unsigned
    (dot_u8x64), or Q8_0's / IQ4's signed codes where `signed` (sdot_i8x64, SIGNED_DOT)."""
    if signed:
        return sdot_i8x64(p, u, bcast4_i8x64(xq, xo))
    return dot_u8x64(p, u, bcast4_i8x64(xq, xo))


@njit(cache=True, nogil=True, inline="always")
def _dot4(p, u0, u1, u2, u3, xq, xo, signed=False):
    """p + the dots of chunks u0..u3 with activation bytes xo, xo+4, xo+8, xo+12 (_dot1 each)."""
    p = _dot1(p, u0, xq, xo, signed)
    p = _dot1(p, u1, xq, xo + 4, signed)
    p = _dot1(p, u2, xq, xo + 8, signed)
    return _dot1(p, u3, xq, xo + 12, signed)


@njit(cache=True, nogil=True, inline="always")
def _dot8_u4(p, u0, u1, u2, u3, u4, u5, u6, u7, xq, xo):
    """p + the dots of chunks u0..u7 (codes <= 15) with activation bytes xo, xo+4, .., xo+28: _dot4 twice, in
    fewer ops on AVX2 without VNNI (qdot_tile.dot8_u4_u8x64)."""
    return dot8_u4_u8x64(p, u0, u1, u2, u3, u4, u5, u6, u7,
                         bcast4_i8x64(xq, xo), bcast4_i8x64(xq, xo + 4), bcast4_i8x64(xq, xo + 8), bcast4_i8x64(xq, xo + 12),
                         bcast4_i8x64(xq, xo + 16), bcast4_i8x64(xq, xo + 20), bcast4_i8x64(xq, xo + 24), bcast4_i8x64(xq, xo + 28))  # fmt: skip


@njit(cache=True, nogil=True, inline="always")
def _block_dot(s0, u0, u1, u2, u3, u4, u5, u6, u7, xq, xo, nibbles):
    """s0 + the 16 rows' dot of one 32-element block (code vectors u0..u7: elements 4k.., 16+4k..) with
    xq[xo:xo+32]: Q4_0's nibbles (`nibbles`, codes <= 15) through _dot8_u4; Q8_0's codes and IQ4's looked-up
    values signed where SIGNED_DOT, else as value + 128."""
    if nibbles:
        return _dot8_u4(splat_i32x16(s0), u0, u1, u2, u3, u4, u5, u6, u7, xq, xo)
    if SIGNED_DOT:
        return _dot4(_dot4(splat_i32x16(s0), u0, u1, u2, u3, xq, xo, True), u4, u5, u6, u7, xq, xo + 16, True)
    return add_i32x16(_dot4(splat_i32x16(s0), u0, u1, u2, u3, xq, xo), _dot4(splat_i32x16(0), u4, u5, u6, u7, xq, xo + 16))  # fmt: skip


@njit(cache=True, nogil=True, inline="always")
def _dot4_u6(p, u0, u1, u2, u3, xq, xo):
    """_dot4 for codes <= 63 (Q6_K), in fewer ops on AVX2 without VNNI (qdot_tile.dot4_u6_u8x64)."""
    return dot4_u6_u8x64(p, u0, u1, u2, u3,
                         bcast4_i8x64(xq, xo), bcast4_i8x64(xq, xo + 4), bcast4_i8x64(xq, xo + 8), bcast4_i8x64(xq, xo + 12))  # fmt: skip


@njit(cache=True, nogil=True)
def _offsets(xq, nb, off):
    """(T, nb) int32: -off * the sum of each block's activation codes (nb blocks of C/nb elements a row); zeros
    without summing where off is 0 (signed codes: SIGNED_DOT)."""
    t, c = xq.shape
    if off == 0:
        return np.zeros((t, nb), np.int32)
    bs = c // nb
    sa = np.empty((t, nb), np.int32)
    for j in range(t):
        for b in range(nb):
            s = 0
            for i in range(bs):
                s += np.int32(xq[j, b * bs + i])
            sa[j, b] = -off * s
    return sa


@njit(cache=True, nogil=True, inline="always")
def _scale_min(a, m, md, s):
    """Sub-block s's 6-bit scale and min of 16 Q4_K rows (ggml's get_scale_min_k4), from the three scale
    words of each row: a = bytes 0-3, m = bytes 4-7, md = bytes 8-11."""
    if s < 4:
        return bits_i32x16(a, 8 * s, 63), bits_i32x16(m, 8 * s, 63)
    i = s - 4
    sc = or_shl_i32x16(bits_i32x16(md, 8 * i, 15), bits_i32x16(a, 8 * i + 6, 3), 4)
    mn = or_shl_i32x16(bits_i32x16(md, 8 * i + 4, 15), bits_i32x16(m, 8 * i + 6, 3), 4)
    return sc, mn
