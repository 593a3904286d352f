"""Paged causal attention one query row at a time, every head of the row together (decode-shaped work).

attention.paged_attention visits (query row, KV head) items: each reads one head's 4-line slice of
every position's K and V rows, page-strided, and its dot loops ran ~60 us hot for a TinyLlama decode
row at 160 positions and ~150 us with the pages cold, as they are in a decode step (the layer's
weights have streamed through the caches since the step before). Here a row reads each position's
whole K row (all KV heads: one contiguous stretch). Where a KV head's group of query heads is a multiple
of 4 (GQA: TinyLlama 8, Llama 3 4), the scores come 4 positions x 4 heads at a time (`_scores4`): each K
vector is loaded (and converted from fp16) once for 4 heads, and the 16 dots are finished together by one
transposing sum (sums16_f32x16) instead of 16 horizontal sums, the K and V rows 16 positions ahead
prefetched. Other groups (1: MHA, 3, 5, 7) take 16 positions of one head at a time, with the next 16
positions' rows prefetched over the chunk's head loop. TinyLlama's decode row (32 heads, 4 KV heads, D
64), 2 threads, Zen 4: 160 positions 21 us hot (28 with 16 x 1), 512 positions 60 us (85); the dots are
the same sums in the same order, so both ways give the same bits. Without AVX-512 (`NARROW`) the same two
shapes run in 8-lane vectors (`_scores4n`, `_scores8n`), which fit AVX2's 16 registers. The V pass
(`_values`) keeps 4 heads x 16 dims of the output in registers over 32 positions at a time.
Needs D % 16 == 0 and float32 or fp16 (uint16) pages (`supported`); same contract and numbers as
attention.paged_attention up to float summation order. A long row is cut into spans over every KV head, merged
after (`SPAN_BYTES`, `_plan`, `_merge`; attention_rows_q8 runs the same items on q8_0 pages). Over 500 lines:
the wide and the narrow score kernels, the values pass and the span split share their helpers here.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic, overload

from modelc.kernels.attention.attention_parts import _row_seq, softmax_rows, softmax_rows_max, work_item
from modelc.kernels.runtime.cpu import HAS_AVX512_VNNI
from modelc.kernels.simd.fastexp import exp_weight
from modelc.kernels.simd.qdot import (
    F32x8,
    F32x16,
    fma_f32x8,
    fma_f32x16,
    hsum_f32x8,
    hsum_f32x16,
    load_f16x8,
    load_f16x16,
    load_f32x8,
    load_f32x16,
    mul_f32x8,
    mul_f32x16,
    prefetch,
    splat_f32x8,
    splat_f32x16,
    store_f32x8,
    store_f32x16,
    zeros_f32x8,
    zeros_f32x16,
)

CHUNK = 16
"""Positions whose dots with a head are finished together (sums16_f32x16) where the group is not a multiple
of 4; while one chunk is read, the next chunk's whole K and V rows (K heads x D elements each) are
prefetched."""
AHEAD4 = 16
"""_scores4: how many positions ahead of the 4 being read their K and V rows are prefetched."""
VBLOCK = 32
"""_values: positions whose V rows are read for every output dim before the next ones (their lines stay in L1)."""
NARROW = not HAS_AVX512_VNNI
"""The scores in 8-lane vectors (_scores4n: 4 heads x 2 positions, _scores8n: 8 positions of one head): without
AVX-512's 32 registers, _scores4's 16 accumulators of 16 lanes are 32 of AVX2's 16 ymm registers, and the
spills made TinyLlama's decode attention at 1900 positions cost ~14 ms a token on Zen 3 (2 threads)."""


def supported(q: np.ndarray, k_pages: np.ndarray) -> bool:
    return q.shape[-1] % 16 == 0 and k_pages.dtype in (np.float32, np.uint16)


def _kv_loader(lanes: int, load_f16, load_f32):
    """load_kv{lanes}(flat, i): `lanes` stored KV elements at element i of a 1-D page array (fp16 as uint16, or
    float32), as float32 (numba only)."""

    def load(flat, i):
        raise NotImplementedError("numba only")

    load.__name__ = load.__qualname__ = f"load_kv{lanes}"

    @overload(load, inline="always")
    def _impl(flat, i):
        if flat.dtype == types.uint16:
            return lambda flat, i: load_f16(flat, i)
        if flat.dtype == types.float32:
            return lambda flat, i: load_f32(flat, i)
        return None

    return load


load_kv16 = _kv_loader(16, load_f16x16, load_f32x16)
load_kv8 = _kv_loader(8, load_f16x8, load_f32x8)


def _fold_sums(builder, vs: list, n: int):
    """Lane i = the sum of the n lanes of vs[i] (n vectors of n lanes): pairs are folded level by level, a vector
    holding k dots as k runs of w lanes and another alike giving one holding 2k dots as runs of w/2 lanes. Each
    sum is added in hsum's order (halves, then quarters, ...), so a dot gives the same bits either way."""
    i32 = ir.IntType(32)
    k = 1
    while len(vs) > 1:
        w = n // k
        lo = [i * w + ln for i in range(k) for ln in range(w // 2)]
        m_lo = ir.Constant(ir.VectorType(i32, n), lo + [n + x for x in lo])
        m_hi = ir.Constant(ir.VectorType(i32, n), [x + w // 2 for x in lo] + [n + x + w // 2 for x in lo])
        vs = [builder.fadd(builder.shuffle_vector(x, y, m_lo), builder.shuffle_vector(x, y, m_hi))
              for x, y in zip(vs[0::2], vs[1::2], strict=True)]  # fmt: skip
        k *= 2
    return vs[0]


@intrinsic
def sums16_f32x16(typingctx, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15):
    """Lane i = the sum of the 16 lanes of ai: 16 dot products finished together (45 shuffles and adds
    instead of 16 horizontal sums of ~8 each; _fold_sums)."""
    args = (a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15)
    if any(a != F32x16 for a in args):
        return None

    def codegen(context, builder, sig, vals):
        return _fold_sums(builder, list(vals), 16)

    return F32x16(*args), codegen


@intrinsic
def sums8_f32x8(typingctx, a0, a1, a2, a3, a4, a5, a6, a7):
    """Lane i = the sum of the 8 lanes of ai (_fold_sums): the narrow kernels' 8 dots finished together."""
    args = (a0, a1, a2, a3, a4, a5, a6, a7)
    if any(a != F32x8 for a in args):
        return None

    def codegen(context, builder, sig, vals):
        return _fold_sums(builder, list(vals), 8)

    return F32x8(*args), codegen


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, inline="always")
def _dot(qf, qo, kflat, ko, D):
    """q[qo:qo+D] . K[ko:ko+D] as 16 lanes of partial sums."""
    a = zeros_f32x16()
    for c in range(0, D, 16):
        a = fma_f32x16(a, load_f32x16(qf, qo + c), load_kv16(kflat, ko + c))
    return a


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, inline="always")
def _dots4x4(qf, qo, D, kflat, b0, b1, b2, b3):
    """The 16 dots of 4 consecutive heads (q at qo, qo + D, ...) with 4 positions' K rows (b0..b3: the head's
    offset in each), lane 4 i + p = head i with position p: each K vector is loaded once for the 4 heads."""
    a0 = a1 = a2 = a3 = b_0 = b_1 = b_2 = b_3 = zeros_f32x16()
    c0 = c1 = c2 = c3 = d0 = d1 = d2 = d3 = zeros_f32x16()
    for c in range(0, D, 16):
        qa = load_f32x16(qf, qo + c)
        qb = load_f32x16(qf, qo + D + c)
        qc = load_f32x16(qf, qo + 2 * D + c)
        qd = load_f32x16(qf, qo + 3 * D + c)
        k = load_kv16(kflat, b0 + c)
        a0, b_0, c0, d0 = fma_f32x16(a0, qa, k), fma_f32x16(b_0, qb, k), fma_f32x16(c0, qc, k), fma_f32x16(d0, qd, k)
        k = load_kv16(kflat, b1 + c)
        a1, b_1, c1, d1 = fma_f32x16(a1, qa, k), fma_f32x16(b_1, qb, k), fma_f32x16(c1, qc, k), fma_f32x16(d1, qd, k)
        k = load_kv16(kflat, b2 + c)
        a2, b_2, c2, d2 = fma_f32x16(a2, qa, k), fma_f32x16(b_2, qb, k), fma_f32x16(c2, qc, k), fma_f32x16(d2, qd, k)
        k = load_kv16(kflat, b3 + c)
        a3, b_3, c3, d3 = fma_f32x16(a3, qa, k), fma_f32x16(b_3, qb, k), fma_f32x16(c3, qc, k), fma_f32x16(d3, qd, k)
    return sums16_f32x16(a0, a1, a2, a3, b_0, b_1, b_2, b_3, c0, c1, c2, c3, d0, d1, d2, d3)


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, inline="always")
def _scores4(scores, qf, kflat, vflat, bases, t, n, K, H, D, scale, k0, k1):
    """scores[h - k0 G, j] = scale q_h . K_j for the heads of KV heads k0 .. k1 - 1, 4 positions x 4 heads at a
    time (G % 4 == 0), the K and V rows AHEAD4 positions ahead prefetched; positions n - n % 4 .. n - 1 are
    left to the caller."""
    G = H // K
    _prefetch_part(kflat, vflat, bases, 0, min(AHEAD4, n), k0 * D, (k1 - k0) * D, 0, 1, True)
    tmp = np.empty(16, np.float32)
    sv = splat_f32x16(scale)
    h0 = k0 * G
    j0 = 0
    while j0 + 4 <= n:
        _prefetch_part(kflat, vflat, bases, min(j0 + AHEAD4, n), min(j0 + AHEAD4 + 4, n), k0 * D, (k1 - k0) * D, 0, 1,
                       True)  # fmt: skip
        for kh in range(k0, k1):
            ko = kh * D
            for h in range(kh * G, (kh + 1) * G, 4):
                sc = _dots4x4(qf, (t * H + h) * D, D, kflat, bases[j0] + ko, bases[j0 + 1] + ko, bases[j0 + 2] + ko,
                              bases[j0 + 3] + ko)  # fmt: skip
                store_f32x16(tmp, 0, mul_f32x16(sc, sv))
                for i in range(4):
                    for p in range(4):
                        scores[h - h0 + i, j0 + p] = tmp[4 * i + p]
        j0 += 4
    return j0


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True)
def _scores16(scores, qf, kflat, vflat, bases, t, n, K, H, D, scale, k0, k1):
    """_scores4's scores for any group size, 16 positions of one head at a time (the next 16 positions' rows
    prefetched over the chunk's head loop); positions n - n % 16 .. n - 1 are left to the caller.

    Not inlined, unlike _scores4: every kernel that inlines _row would compile both loops (paged_attention_rows
    and its parallel twin took 35 s to compile instead of 22 with both inlined), while a call costs ~nothing."""
    G = H // K
    h0 = k0 * G
    _prefetch_part(kflat, vflat, bases, 0, min(CHUNK, n), k0 * D, (k1 - k0) * D, 0, 1, True)  # the first chunk
    j0 = 0
    while j0 + CHUNK <= n:
        for h in range(h0, k1 * G):
            _prefetch_part(kflat, vflat, bases, j0 + CHUNK, min(j0 + 2 * CHUNK, n), k0 * D, (k1 - k0) * D, h - h0,
                           (k1 - k0) * G, True)  # fmt: skip
            qo = (t * H + h) * D
            ko = (h // G) * D
            sc = sums16_f32x16(
                _dot(qf, qo, kflat, bases[j0] + ko, D), _dot(qf, qo, kflat, bases[j0 + 1] + ko, D),
                _dot(qf, qo, kflat, bases[j0 + 2] + ko, D), _dot(qf, qo, kflat, bases[j0 + 3] + ko, D),
                _dot(qf, qo, kflat, bases[j0 + 4] + ko, D), _dot(qf, qo, kflat, bases[j0 + 5] + ko, D),
                _dot(qf, qo, kflat, bases[j0 + 6] + ko, D), _dot(qf, qo, kflat, bases[j0 + 7] + ko, D),
                _dot(qf, qo, kflat, bases[j0 + 8] + ko, D), _dot(qf, qo, kflat, bases[j0 + 9] + ko, D),
                _dot(qf, qo, kflat, bases[j0 + 10] + ko, D), _dot(qf, qo, kflat, bases[j0 + 11] + ko, D),
                _dot(qf, qo, kflat, bases[j0 + 12] + ko, D), _dot(qf, qo, kflat, bases[j0 + 13] + ko, D),
                _dot(qf, qo, kflat, bases[j0 + 14] + ko, D), _dot(qf, qo, kflat, bases[j0 + 15] + ko, D),
            )  # fmt: skip
            store_f32x16(scores[h - h0], j0, mul_f32x16(sc, splat_f32x16(scale)))
        j0 += CHUNK
    return j0


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, inline="always")
def _dot8(qf, qo, kflat, ko, D):
    """q[qo:qo+D] . K[ko:ko+D] as 8 lanes of partial sums (the narrow kernels' _dot)."""
    a = zeros_f32x8()
    for c in range(0, D, 8):
        a = fma_f32x8(a, load_f32x8(qf, qo + c), load_kv8(kflat, ko + c))
    return a


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, inline="always")
def _dots4x2(qf, qo, D, kflat, b0, b1, acc, ao):
    """The 8 dots of 4 consecutive heads (q at qo, qo + D, ...) with 2 positions' K rows (b0, b1: the head's offset
    in each) as 8 vectors of lane partial sums, summed as _dot8 sums them, stored to acc[ao:ao + 64] (vector 2 i + p:
    head i with position p): 8 accumulators, 4 q vectors and a K vector fit AVX2's 16 registers, and each K vector
    is loaded (converted) once for the 4 heads. The caller finishes them later (_finish4n), many at once: finished
    here, each call's FMA chains and its transposing sum ran one after the other (~90 cycles a call on Zen 3,
    ~50 with the sums left for later)."""
    a0 = a1 = b_0 = b_1 = c0 = c1 = d0 = d1 = zeros_f32x8()
    for c in range(0, D, 8):
        qa = load_f32x8(qf, qo + c)
        qb = load_f32x8(qf, qo + D + c)
        qc = load_f32x8(qf, qo + 2 * D + c)
        qd = load_f32x8(qf, qo + 3 * D + c)
        k = load_kv8(kflat, b0 + c)
        a0, b_0, c0, d0 = fma_f32x8(a0, qa, k), fma_f32x8(b_0, qb, k), fma_f32x8(c0, qc, k), fma_f32x8(d0, qd, k)
        k = load_kv8(kflat, b1 + c)
        a1, b_1, c1, d1 = fma_f32x8(a1, qa, k), fma_f32x8(b_1, qb, k), fma_f32x8(c1, qc, k), fma_f32x8(d1, qd, k)
    store_f32x8(acc, ao, a0)
    store_f32x8(acc, ao + 8, a1)
    store_f32x8(acc, ao + 16, b_0)
    store_f32x8(acc, ao + 24, b_1)
    store_f32x8(acc, ao + 32, c0)
    store_f32x8(acc, ao + 40, c1)
    store_f32x8(acc, ao + 48, d0)
    store_f32x8(acc, ao + 56, d1)


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, inline="always")
def _finish4n(scores, acc, pairs, groups, j0, sv):
    """scores of `pairs` position pairs from j0 x `groups` 4-head groups from _dots4x2's partial sums in acc (pair p,
    group g at (p groups + g) 64): each 8 dots finished by one transposing sum, times the scale."""
    tmp = np.empty(8, np.float32)
    for p in range(pairs):
        j = j0 + 2 * p
        for g in range(groups):
            o = (p * groups + g) * 64
            sc = sums8_f32x8(
                load_f32x8(acc, o), load_f32x8(acc, o + 8), load_f32x8(acc, o + 16), load_f32x8(acc, o + 24),
                load_f32x8(acc, o + 32), load_f32x8(acc, o + 40), load_f32x8(acc, o + 48), load_f32x8(acc, o + 56),
            )  # fmt: skip
            store_f32x8(tmp, 0, mul_f32x8(sc, sv))
            for i in range(4):
                scores[4 * g + i, j] = tmp[2 * i]
                scores[4 * g + i, j + 1] = tmp[2 * i + 1]


SPAN4N = 8
"""_scores4n: position pairs whose partial sums are stored before they are finished together."""


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, inline="always")
def _scores4n(scores, qf, kflat, vflat, bases, t, n, K, H, D, scale, k0, k1):
    """_scores4 in 8-lane vectors (NARROW; _scores4's arguments, vflat unread): 2 positions x 4 heads at a time,
    every head of the KV heads k0 .. k1 - 1 for a pair of positions before the next pair (their K rows stay in L1
    across the heads), finished SPAN4N pairs at a time; position n - 1 is left to the caller where n is odd."""
    G = H // K
    groups = (k1 - k0) * G // 4
    _prefetch_part(kflat, kflat, bases, 0, min(AHEAD4, n), k0 * D, (k1 - k0) * D, 0, 1, False)
    acc = np.empty(SPAN4N * groups * 64, np.float32)
    sv = splat_f32x8(scale)
    j0 = 0
    while j0 + 2 <= n:
        pairs = min(SPAN4N, (n - j0) // 2)
        for p in range(pairs):
            j = j0 + 2 * p
            _prefetch_part(kflat, kflat, bases, min(j + AHEAD4, n), min(j + AHEAD4 + 2, n), k0 * D, (k1 - k0) * D, 0, 1,
                           False)  # fmt: skip
            g = p * groups
            for kh in range(k0, k1):
                ko = kh * D
                for h in range(kh * G, (kh + 1) * G, 4):
                    _dots4x2(qf, (t * H + h) * D, D, kflat, bases[j] + ko, bases[j + 1] + ko, acc, g * 64)
                    g += 1
        _finish4n(scores, acc, pairs, groups, j0, sv)
        j0 += 2 * pairs
    return j0


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True)
def _scores8n(scores, qf, kflat, vflat, bases, t, n, K, H, D, scale, k0, k1):
    """_scores16 in 8-lane vectors (NARROW; _scores16's arguments, vflat unread): 8 positions of one head at a time
    (8 accumulators), the next 8 positions' rows prefetched over the chunk's head loop; positions n - n % 8 ..
    n - 1 are left to the caller."""
    G = H // K
    h0 = k0 * G
    _prefetch_part(kflat, kflat, bases, 0, min(8, n), k0 * D, (k1 - k0) * D, 0, 1, False)  # the first chunk
    j0 = 0
    while j0 + 8 <= n:
        for h in range(h0, k1 * G):
            _prefetch_part(kflat, kflat, bases, j0 + 8, min(j0 + 16, n), k0 * D, (k1 - k0) * D, h - h0, (k1 - k0) * G,
                           False)  # fmt: skip
            qo = (t * H + h) * D
            ko = (h // G) * D
            sc = sums8_f32x8(
                _dot8(qf, qo, kflat, bases[j0] + ko, D), _dot8(qf, qo, kflat, bases[j0 + 1] + ko, D),
                _dot8(qf, qo, kflat, bases[j0 + 2] + ko, D), _dot8(qf, qo, kflat, bases[j0 + 3] + ko, D),
                _dot8(qf, qo, kflat, bases[j0 + 4] + ko, D), _dot8(qf, qo, kflat, bases[j0 + 5] + ko, D),
                _dot8(qf, qo, kflat, bases[j0 + 6] + ko, D), _dot8(qf, qo, kflat, bases[j0 + 7] + ko, D),
            )  # fmt: skip
            store_f32x8(scores[h - h0], j0, mul_f32x8(sc, splat_f32x8(scale)))
        j0 += 8
    return j0


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _prefetch_part(a, b, bases, j0, j1, off, width, part, parts, both):
    """Part `part` of `parts` of the lines of positions j0 .. j1 - 1 (elements off .. off + width of each row) of
    page array a, and of b at the same offsets where `both` (K and V; the narrow scores prefetch K only, and
    _values its own V: V lines prefetched with the scores are gone from the caches by the V pass at long
    contexts). A chunk's prefetches are spread over the head loop of the chunk before, so they do not queue up
    in one burst that holds back that loop's own loads."""
    step = 64 // a.itemsize
    per_row = (width + step - 1) // step
    total = (j1 - j0) * per_row
    i = part * total // parts
    j, ln = j0 + i // per_row, i % per_row
    for _ in range(i, (part + 1) * total // parts):
        e = bases[j] + off + ln * step
        prefetch(a, e)
        if both:
            prefetch(b, e)
        ln += 1
        if ln == per_row:
            ln = 0
            j += 1


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, inline="always")
def _one_dot(qf, qo, kflat, ko, D):
    """q[qo:qo+D] . K[ko:ko+D], summed as the path's scores kernels sum it (8 lanes where NARROW, else 16)."""
    if NARROW:
        return hsum_f32x8(_dot8(qf, qo, kflat, ko, D))
    return hsum_f32x16(_dot(qf, qo, kflat, ko, D))


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True)
def _values(of, vflat, bases, scores, denom, vacc, t, n, H, D, G, kh, h0):
    """Row t's output for the G heads of KV head kh: their softmax weights (scores rows kh G - h0 ..) times the
    positions' V rows, over the denominators. VBLOCK positions at a time, every 16 dims x 4 heads of the block
    before the next block (partial sums kept in vacc, (G D,) f32, between blocks; the next block's V lines
    prefetched a share in each of the block's passes). Passes over all n positions per 16 dims read each V
    line 8 times from the caches or memory: ~12 cycles a position on Zen 3 where the FMAs take ~5, and at 1900
    positions (22 layers, one thread) 5.1-5.4 ms a token against 3.8 in blocks. Each sum adds the positions
    in order, as those passes did: the same bits."""
    vacc[:] = 0.0
    g0 = kh * G - h0  # scores row of the group's first head
    vo = kh * D
    passes = (D // 16) * (G // 4 + G % 4)
    _prefetch_part(vflat, vflat, bases, 0, min(VBLOCK, n), vo, D, 0, 1, False)
    for j0 in range(0, n, VBLOCK):
        j1 = min(j0 + VBLOCK, n)
        p = 0
        for c in range(0, D, 16):
            g = 0
            while g + 4 <= G:  # 4 heads of the group at a time, accumulators in registers
                _prefetch_part(vflat, vflat, bases, j1, min(j1 + VBLOCK, n), vo, D, p, passes, False)
                p += 1
                o = g * D + c
                a0, a1 = load_f32x16(vacc, o), load_f32x16(vacc, o + D)
                a2, a3 = load_f32x16(vacc, o + 2 * D), load_f32x16(vacc, o + 3 * D)
                for j in range(j0, j1):
                    v = load_kv16(vflat, bases[j] + vo + c)
                    a0 = fma_f32x16(a0, v, splat_f32x16(scores[g0 + g, j]))
                    a1 = fma_f32x16(a1, v, splat_f32x16(scores[g0 + g + 1, j]))
                    a2 = fma_f32x16(a2, v, splat_f32x16(scores[g0 + g + 2, j]))
                    a3 = fma_f32x16(a3, v, splat_f32x16(scores[g0 + g + 3, j]))
                store_f32x16(vacc, o, a0)
                store_f32x16(vacc, o + D, a1)
                store_f32x16(vacc, o + 2 * D, a2)
                store_f32x16(vacc, o + 3 * D, a3)
                g += 4
            while g < G:
                _prefetch_part(vflat, vflat, bases, j1, min(j1 + VBLOCK, n), vo, D, p, passes, False)
                p += 1
                a0 = load_f32x16(vacc, g * D + c)
                for j in range(j0, j1):
                    a0 = fma_f32x16(a0, load_kv16(vflat, bases[j] + vo + c), splat_f32x16(scores[g0 + g, j]))
                store_f32x16(vacc, g * D + c, a0)
                g += 1
    for g in range(G):
        inv = splat_f32x16(np.float32(1.0) / denom[g0 + g])
        for c in range(0, D, 16):
            store_f32x16(of, (t * H + kh * G + g) * D + c, mul_f32x16(load_f32x16(vacc, g * D + c), inv))


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True)
def _row(out, ot, qf, kflat, vflat, block_tables, t, s, lo, n, Z, K, H, D, scale, k0, k1, ml):
    """Query row t of sequence s attends positions lo .. lo + n - 1 with the heads of KV heads k0 .. k1 - 1:
    those heads of out[ot] ((rows, H, D)) written (_row_core on the positions' rows in the pages)."""
    bases = np.empty(n, dtype=np.int64)  # element offset of each position's K (V) row
    for j in range(n):
        p = lo + j
        bases[j] = (block_tables[s, p // Z] * Z + p % Z) * (K * D)
    _row_core(out, ot, qf, kflat, vflat, bases, t, n, K, H, D, scale, k0, k1, ml)


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True)
def _row_core(out, ot, qf, kflat, vflat, bases, t, n, K, H, D, scale, k0, k1, ml):
    """Query row t against the n K / V rows at element offsets bases (K D elements each, every KV head) of kflat /
    vflat, with the heads of KV heads k0 .. k1 - 1: those heads of out[ot] ((rows, H, D)) written. ml (2, H)
    empty: normalized (the row's whole range); else a span of it: out[ot] unnormalized (the sum of exp(score -
    the span's max) V), ml[0] the span's maxima and ml[1] its sums of exps (_merge). A call, not inlined: the
    serial and the parallel kernel then share its machine code, compiled once (inlined, each compiled it: 8.4
    and 14.4 of SmolLM2's ~57 CPU-s of compiling on the Emerald Rapids VM)."""
    G = H // K
    h0 = k0 * G  # scores row h - h0 is head h
    scores = np.empty(((k1 - k0) * G, n), dtype=np.float32)
    if NARROW:
        if G % 4 == 0:
            j0 = _scores4n(scores, qf, kflat, vflat, bases, t, n, K, H, D, scale, k0, k1)
        else:
            j0 = _scores8n(scores, qf, kflat, vflat, bases, t, n, K, H, D, scale, k0, k1)
    elif G % 4 == 0:
        j0 = _scores4(scores, qf, kflat, vflat, bases, t, n, K, H, D, scale, k0, k1)
    else:
        j0 = _scores16(scores, qf, kflat, vflat, bases, t, n, K, H, D, scale, k0, k1)
    for j in range(j0, n):  # the positions those leave (n % 2, n % 4, n % 8 or n % 16) one at a time
        for h in range(h0, k1 * G):
            scores[h - h0, j] = _one_dot(qf, (t * H + h) * D, kflat, bases[j] + (h // G) * D, D) * scale
    if ml.shape[1] == 0:
        denom = softmax_rows(scores)
    else:  # a span: its maxima and sums kept, the values left unnormalized (times 1: the same bits)
        denom = softmax_rows_max(scores, ml[0, h0 : k1 * G])
        for h in range(h0, k1 * G):  # a loop: an array slice assignment compiles numba's shape-error message
            ml[1, h] = denom[h - h0]
        denom[:] = 1.0
    of = out.reshape(-1)
    vacc = np.empty(G * D, dtype=np.float32)
    for kh in range(k0, k1):
        _values(of, vflat, bases, scores, denom, vacc, ot, n, H, D, G, kh, h0)


SPAN_BYTES = 1 << 20
"""A row of at least two spans' positions is split into spans of about this many K + V bytes (span_len), each a
work item over every KV head, merged after (flash-decoding): one decode row's positions are spread over the
threads, each thread streaming whole K / V rows of consecutive positions, and a span's V rows (prefetched with
its K rows while the scores are computed) are still in L2 when its values pass reads them. The split depends on
the row's length and the KV shape only, never on the thread count, so every kernel gives the same bits."""


@njit(cache=True, nogil=True, inline="always")
def span_len(K, D, itemsize):
    """Positions in a span: SPAN_BYTES of K + V rows, 64 to 1024, a multiple of 16."""
    s = max(64, min(1024, SPAN_BYTES // (2 * K * D * itemsize)))
    return s - s % 16


@njit(cache=True, nogil=True, error_model="numpy")
def _plan(T, head_parts, row_seq, q_start, pos_start, window, span):
    """The work items of T rows: (I, 6) int64 (row t, sequence, first position, positions, KV-head part or -1 for a
    span, span index), short and long rows alternating; a row of fewer than 2 spans' positions is head_parts
    items (its KV heads split), a longer one a span item each. Also each row's first span and span count (0:
    not split)."""
    first = np.zeros(T, np.int64)
    count = np.zeros(T, np.int64)
    rows = np.empty((T, 3), np.int64)  # (sequence, lo, n) in item order
    num_items = num_spans = 0
    for i in range(T):
        t, _, s, pos, lo = work_item(T, 1, i, row_seq, q_start, pos_start, window)
        n = pos + 1 - lo
        rows[i, 0], rows[i, 1], rows[i, 2] = s, lo, n
        if n >= 2 * span:
            first[t], count[t] = num_spans, n // span
            num_spans += n // span
            num_items += n // span
        else:
            num_items += head_parts
    items = np.empty((num_items, 6), np.int64)
    k = 0
    for i in range(T):
        t = work_item(T, 1, i, row_seq, q_start, pos_start, window)[0]
        s, lo, n = rows[i, 0], rows[i, 1], rows[i, 2]
        parts = count[t]
        for p in range(parts if parts else head_parts):
            items[k, 0], items[k, 1] = t, s
            if parts:
                a, b = lo + p * n // parts, lo + (p + 1) * n // parts
                items[k, 2], items[k, 3], items[k, 4], items[k, 5] = a, b - a, -1, first[t] + p
            else:
                items[k, 2], items[k, 3], items[k, 4], items[k, 5] = lo, n, p, -1
            k += 1
    return items, first, count, num_spans


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, inline="always")
def _item(out, part_o, ml, no_ml, qf, kflat, vflat, block_tables, it, head_parts, Z, K, H, D, scale):
    """One work item of _plan: a part of a row's KV heads, or a span of a row (every KV head). no_ml: (2, 0), C
    order as ml[span] is (one compiled _row)."""
    t, s, lo, n, part, span = it[0], it[1], it[2], it[3], it[4], it[5]
    # np.int64(0), not 0: numba compiles a call again for a literal int argument (_row, _row_core, _scores16)
    if span < 0:
        _row(out, t, qf, kflat, vflat, block_tables, t, s, lo, n, Z, K, H, D, scale, part * K // head_parts,
             (part + 1) * K // head_parts, no_ml)  # fmt: skip
    else:
        _row(part_o, span, qf, kflat, vflat, block_tables, t, s, lo, n, Z, K, H, D, scale, np.int64(0), K, ml[span])


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True)
def _merge(out, t, part_o, ml, first, count):
    """out[t] from the spans first .. first + count - 1 of row t: each head's span sums rescaled to the largest
    span maximum, added in span order, over the rescaled sum of exps."""
    H, D = part_o.shape[1], part_o.shape[2]
    acc = np.empty(D, np.float32)
    for h in range(H):
        m = ml[first, 0, h]
        for p in range(first + 1, first + count):
            m = max(m, ml[p, 0, h])
        acc[:] = 0.0
        tot = np.float32(0.0)
        for p in range(first, first + count):
            w = exp_weight(ml[p, 0, h] - m)
            tot += w * ml[p, 1, h]
            src = part_o[p, h]
            for d in range(D):
                acc[d] += w * src[d]
        inv = np.float32(1.0) / tot
        dst = out[t, h]
        for d in range(D):
            dst[d] = acc[d] * inv


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True)
def paged_attention_rows(out, q, k_pages, v_pages, block_tables, q_start, pos_start, scale, window):
    """attention.paged_attention's contract (q and out C-contiguous), on the calling thread (long rows in spans,
    as the parallel kernel splits them: the same bits)."""
    T, H, D = q.shape
    Z, K = k_pages.shape[1], k_pages.shape[2]
    row_seq = _row_seq(T, q_start)
    qf, kflat, vflat = q.reshape(-1), k_pages.reshape(-1), v_pages.reshape(-1)
    items, first, count, num_spans = _plan(T, np.int64(1), row_seq, q_start, pos_start, window,
                                           span_len(K, D, k_pages.itemsize))  # fmt: skip
    part_o = np.empty((num_spans, H, D), np.float32)
    ml = np.empty((num_spans, 2, H), np.float32)
    no_ml = np.empty((2, 0), np.float32)
    for i in range(items.shape[0]):
        _item(out, part_o, ml, no_ml, qf, kflat, vflat, block_tables, items[i], 1, Z, K, H, D, np.float32(scale))
    for t in range(T):
        if count[t]:
            _merge(out, t, part_o, ml, first[t], count[t])


@njit(cache=True, nogil=True, error_model="numpy", fastmath=True, parallel=True)
def paged_attention_rows_parallel(out, q, k_pages, v_pages, block_tables, q_start, pos_start, scale, window):
    """paged_attention_rows with its work items spread over numba's threads (short and long rows alternating); a
    single row (one decode) shorter than two spans is split by KV heads instead, a longer one into its spans."""
    T, H, D = q.shape
    Z, K = k_pages.shape[1], k_pages.shape[2]
    row_seq = _row_seq(T, q_start)
    qf, kflat, vflat = q.reshape(-1), k_pages.reshape(-1), v_pages.reshape(-1)
    head_parts = K if T == 1 else 1
    items, first, count, num_spans = _plan(T, head_parts, row_seq, q_start, pos_start, window,
                                           span_len(K, D, k_pages.itemsize))  # fmt: skip
    part_o = np.empty((num_spans, H, D), np.float32)
    ml = np.empty((num_spans, 2, H), np.float32)
    no_ml = np.empty((2, 0), np.float32)
    for i in prange(items.shape[0]):
        _item(out, part_o, ml, no_ml, qf, kflat, vflat, block_tables, items[i], head_parts, Z, K, H, D,
              np.float32(scale))  # fmt: skip
    for t in prange(T):
        if count[t]:
            _merge(out, t, part_o, ml, first[t], count[t])
