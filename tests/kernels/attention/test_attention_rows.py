from __future__ import annotations

import numpy as np
import pytest

from modelc.kernels.attention import attention, attention_rows
from modelc.kernels.reference import ref

CASES = [
    # (seq_lens, q_lens, H, K, D): decode batch at chunk edges (15, 16, 17, 32, 33 positions), a prefill,
    # a chunk after a cached prefix, groups of 1, 3, 5 (4-head blocks and their remainder), 8, D 16..128;
    # groups of 4 and 8 take 4 positions x 4 heads (_scores4: n % 4 tails), the others 16 positions x 1 head
    ([15, 16, 17, 32, 33], [1, 1, 1, 1, 1], 32, 4, 64),
    ([1, 2, 3, 5, 6, 7, 130], [1, 1, 1, 1, 1, 1, 1], 16, 4, 32),
    ([40], [40], 6, 2, 16),
    ([70], [9], 5, 1, 32),
    ([3, 50, 20], [1, 7, 20], 4, 4, 128),
    ([1], [1], 1, 1, 16),
    ([161], [1], 16, 2, 80),
    # rows of 2+ spans (attention_rows.span_len: 128 positions at K 8, D 128 in f32, 256 in fp16): one decode
    # row, a batch of a long and a short row, a long chunk's rows
    ([300], [1], 32, 8, 128),
    ([700, 20], [1, 1], 16, 8, 128),
    ([530], [3], 8, 8, 128),
]


@pytest.mark.parametrize("seq_lens,q_lens,H,K,D", CASES)
@pytest.mark.parametrize("kv_dtype", ["float32", "float16"])
@pytest.mark.parametrize("window", [0, 19])
def test_rows_kernel_matches_ref(seq_lens, q_lens, H, K, D, kv_dtype, window, tol, paged_case):
    q, kp, vp, bt, qs, ps, _ = paged_case(seq_lens, q_lens, H, K, D, kv_dtype, seed=len(seq_lens) * 7 + D + window)
    scale = 1.0 / np.sqrt(D)
    want = np.full_like(q, np.nan)
    ref.paged_attention(want, q, kp, vp, bt, qs, ps, scale, window)
    for fn in (attention_rows.paged_attention_rows, attention_rows.paged_attention_rows_parallel):
        out = np.full_like(q, np.nan)
        fn(out, q, kp, vp, bt, qs, ps, scale, window)
        np.testing.assert_allclose(out, want, **tol["float32"])


@pytest.mark.parametrize("lanes", [16, 8])
def test_sums_finish_dots_in_lane_order(lanes):
    """sums16_f32x16 / sums8_f32x8: lane i is the sum of vector i's lanes."""
    from numba import njit

    from modelc.kernels.simd import qdot

    load, store = getattr(qdot, f"load_f32x{lanes}"), getattr(qdot, f"store_f32x{lanes}")
    if lanes == 16:

        @njit
        def sums(a, out):
            store(out, 0, attention_rows.sums16_f32x16(
                load(a, 0), load(a, 16), load(a, 32), load(a, 48), load(a, 64), load(a, 80), load(a, 96), load(a, 112),
                load(a, 128), load(a, 144), load(a, 160), load(a, 176), load(a, 192), load(a, 208), load(a, 224),
                load(a, 240)))  # fmt: skip
    else:

        @njit
        def sums(a, out):
            store(out, 0, attention_rows.sums8_f32x8(
                load(a, 0), load(a, 8), load(a, 16), load(a, 24), load(a, 32), load(a, 40), load(a, 48), load(a, 56)))  # fmt: skip

    a = np.random.default_rng(lanes).integers(-50, 50, lanes * lanes).astype(np.float32)
    out = np.empty(lanes, np.float32)
    sums(a, out)
    np.testing.assert_array_equal(out, a.reshape(lanes, lanes).sum(axis=1))


def test_dispatch_picks_rows_where_it_applies(paged_case):
    q, kp, vp, *_ = paged_case([20], [1], 4, 2, 16, "float32", seed=1)
    out = np.empty_like(q)
    assert attention.dense_kernel(out, q, kp, False) is attention_rows.paged_attention_rows
    q24, kp24, *_ = paged_case([20], [2], 4, 2, 24, "float32", seed=1)  # D % 16 != 0
    assert attention.dense_kernel(np.empty_like(q24), q24, kp24, True) is attention.paged_attention_parallel
    strided = np.zeros((2, 4, 32), np.float32)[:, :, ::2]
    assert attention.dense_kernel(np.empty_like(q), strided, kp, False) is attention.paged_attention


_FALLBACK = """
import numpy as np
from modelc.kernels.attention import attention_rows
from modelc.kernels.reference import ref
from modelc.kernels.runtime import cpu
rng = np.random.default_rng(0)
worst = 0.0
for kv in (np.float32, np.float16):
    H, K, D, Z, P = 8, 2, 32, 16, 8
    kp = rng.standard_normal((P, Z, K, D)).astype(kv)
    vp = rng.standard_normal((P, Z, K, D)).astype(kv)
    if kv == np.float16:
        kp, vp = kp.view(np.uint16), vp.view(np.uint16)
    bt = rng.permutation(P).astype(np.int32)[None, :]
    q = rng.standard_normal((3, H, D)).astype(np.float32)
    qs, ps = np.array([0, 3], np.int32), np.array([37], np.int32)
    want = np.empty_like(q)
    ref.paged_attention(want, q, kp, vp, bt, qs, ps, 0.2, 0)
    for fn in (attention_rows.paged_attention_rows, attention_rows.paged_attention_rows_parallel):
        out = np.empty_like(q)
        fn(out, q, kp, vp, bt, qs, ps, 0.2, 0)
        worst = max(worst, float(np.abs(out - want).max() / np.abs(want).max()))
# a decode row of 2+ spans (fp16 pages, K 8, D 128: 256 positions a span), and the same row on q8_0 pages
from modelc.kernels.attention import attention_rows_q8
from tests.kernels.attention.test_kv_q8 import _case
from tests.kernels.conftest import make_paged_case
q, kp, vp, bt, qs, ps, _ = make_paged_case([600], [1], 32, 8, 128, "float16", seed=2)
want, out = np.empty_like(q), np.empty_like(q)
ref.paged_attention(want, q, kp, vp, bt, qs, ps, 0.1, 0)
attention_rows.paged_attention_rows_parallel(out, q, kp, vp, bt, qs, ps, 0.1, 0)
worst = max(worst, float(np.abs(out - want).max() / np.abs(want).max()))
kv, q, bt, qs, ps, _ = _case([600], [1], 8, 128, 32, "q8_0", seed=3)
kp, vp = kv.layer(0)
ref.paged_attention(want, q, kp, vp, bt, qs, ps, 0.1, 0)
attention_rows_q8.paged_attention_rows_q8_parallel(out, q, kp.data, kp.scales, vp.data, vp.scales, bt, qs, ps, 0.1, 0)
worst = max(worst, float(np.abs(out - want).max() / np.abs(want).max()))
# the decode layers' write and attention (decode_layer.write_attend) on those q8_0 pages, compiled in a caller
from tests.kernels.layer.test_write_attend import _in_numba
k, v = rng.standard_normal((2, 1, 8, 128)).astype(np.float32)
slot = np.array([int(bt[0, 600 // 16]) * 16 + 600 % 16], np.int64)
ps1 = ps + 1
_in_numba(kp.data, vp.data, kp.scales, vp.scales, k, v, slot, out, q, bt, qs, ps1, np.float32(0.1), 0, True)
ref.kv_write(kp, vp, k, v, slot)
ref.paged_attention(want, q, kp, vp, bt, qs, ps1, 0.1, 0)
worst = max(worst, float(np.abs(out - want).max() / np.abs(want).max()))
print(cpu.HAS_AVX2, cpu.HAS_VNNI, worst)
"""


@pytest.mark.slow
@pytest.mark.parametrize("env", [{"MODELC_NO_AVX512": "1"}, {"MODELC_NO_AVX2": "1"}])
def test_fallback_paths(env):
    """The 16-lane vectors and the transposing sum lowered to 256-bit and to portable code give the same numbers."""
    from tests.kernels.fallback import fallback_worst

    assert fallback_worst(_FALLBACK, env, timeout=900) < 1e-5


def test_four_by_four_scores_are_the_one_head_scores_bit_for_bit(paged_case):
    """_scores4 sums each dot in the same order as _scores16, so a group of 4 gives the same bits either way."""
    from numba import njit

    q, kp, vp, bt, qs, ps, _ = paged_case([61], [1], 8, 2, 64, "float16", seed=5)
    n, Z, K = 61, kp.shape[1], kp.shape[2]
    bases = np.array([(bt[0, j // Z] * Z + j % Z) * K * 64 for j in range(n)], np.int64)

    @njit
    def both(qf, kf, vf, bases, n):
        a, b = np.zeros((8, n), np.float32), np.zeros((8, n), np.float32)
        ja = attention_rows._scores4(a, qf, kf, vf, bases, 0, n, 2, 8, 64, np.float32(0.125), 0, 2)
        jb = attention_rows._scores16(b, qf, kf, vf, bases, 0, n, 2, 8, 64, np.float32(0.125), 0, 2)
        return a, b, ja, jb

    a, b, ja, jb = both(q.reshape(-1), kp.reshape(-1), vp.reshape(-1), bases, n)
    assert (ja, jb) == (60, 48)
    np.testing.assert_array_equal(a[:, :48], b[:, :48])


@pytest.mark.parametrize("kv_dtype", ["float32", "float16"])
def test_narrow_scores_agree_bit_for_bit_and_match_numpy(kv_dtype, paged_case):
    """The 8-lane kernels (NARROW: CPUs without AVX-512) sum each dot alike, 4 heads x 2 positions or 8 positions
    x 1 head, over several SPAN4N batches and an odd tail; both match the scores numpy computes."""
    from numba import njit

    n, H, K, D = 2 * attention_rows.SPAN4N * 3 + 5, 8, 2, 64
    q, kp, vp, bt, qs, ps, _ = paged_case([n], [1], H, K, D, kv_dtype, seed=9)
    Z = kp.shape[1]
    bases = np.array([(bt[0, j // Z] * Z + j % Z) * K * D for j in range(n)], np.int64)

    @njit
    def both(qf, kf, vf, bases, n):
        a, b = np.zeros((H, n), np.float32), np.zeros((H, n), np.float32)
        ja = attention_rows._scores4n(a, qf, kf, vf, bases, 0, n, K, H, D, np.float32(0.125), 0, K)
        jb = attention_rows._scores8n(b, qf, kf, vf, bases, 0, n, K, H, D, np.float32(0.125), 0, K)
        return a, b, ja, jb

    a, b, ja, jb = both(q.reshape(-1), kp.reshape(-1), vp.reshape(-1), bases, n)
    assert (ja, jb) == (n - 1, n - n % 8)
    np.testing.assert_array_equal(a[:, :jb], b[:, :jb])
    k = (kp.view(np.float16) if kv_dtype == "float16" else kp).astype(np.float32)
    rows = np.stack([k[bt[0, j // Z], j % Z] for j in range(n)])  # (n, K, D)
    want = np.einsum("hd,jhd->hj", q[0], np.repeat(rows, H // K, axis=1)) * 0.125
    np.testing.assert_allclose(a[:, :ja], want[:, :ja], rtol=1e-5, atol=1e-5)


def test_values_in_blocks_match_numpy():
    """_values (VBLOCK positions at a time, partial sums carried between blocks) against numpy, for 4-head groups
    and a remainder head (G = 6), over several blocks and a short last one."""
    from numba import njit

    rng = np.random.default_rng(11)
    n, K, G, D = 3 * attention_rows.VBLOCK + 7, 2, 6, 32
    H = K * G
    v = rng.standard_normal((n, K, D)).astype(np.float32)
    bases = np.arange(n, dtype=np.int64) * K * D
    scores = rng.random((H, n)).astype(np.float32)
    denom = scores.sum(axis=1).astype(np.float32)

    @njit
    def run(of, vf, bases, scores, denom):
        vacc = np.empty(G * D, np.float32)
        for kh in range(K):
            attention_rows._values(of, vf, bases, scores, denom, vacc, 0, n, H, D, G, kh, 0)

    of = np.full(H * D, np.nan, np.float32)
    run(of, v.reshape(-1), bases, scores, denom)
    want = np.einsum("hj,jhd->hd", scores, np.repeat(v, G, axis=1)) / denom[:, None]
    np.testing.assert_allclose(of.reshape(H, D), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kv_dtype", ["float32", "float16"])
def test_long_rows_split_into_spans_give_the_same_bits_serial_and_threaded(kv_dtype, paged_case):
    """A row of two spans or more (span_len positions each) is split by positions and merged, in the serial kernel
    as in the threaded one: the same bits either way, whatever the thread count; the spans' count follows the
    row's length only."""
    span = attention_rows.span_len(8, 128, 4 if kv_dtype == "float32" else 2)
    assert span == (128 if kv_dtype == "float32" else 256)
    q, kp, vp, bt, qs, ps, _ = paged_case([5 * span + 3, 40], [1, 1], 32, 8, 128, kv_dtype, seed=3)
    items, first, count, num_spans = attention_rows._plan(2, 1, attention_rows._row_seq(2, qs), qs, ps, 0, span)
    assert list(count) == [5, 0] and num_spans == 5 and len(items) == 6
    serial, threaded = np.full_like(q, np.nan), np.full_like(q, np.nan)
    attention_rows.paged_attention_rows(serial, q, kp, vp, bt, qs, ps, 0.09, 0)
    attention_rows.paged_attention_rows_parallel(threaded, q, kp, vp, bt, qs, ps, 0.09, 0)
    np.testing.assert_array_equal(serial, threaded)
    want = np.empty_like(q)
    ref.paged_attention(want, q, kp, vp, bt, qs, ps, 0.09, 0)
    np.testing.assert_allclose(serial, want, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize(
    "seq_lens,q_lens,H,K,D",
    [([15, 16, 17, 33], [1, 1, 1, 1], 32, 4, 64), ([300], [1], 32, 8, 128), ([700, 20], [1, 1], 16, 8, 128),
     ([530], [3], 8, 8, 128), ([40], [40], 6, 2, 32), ([161], [1], 16, 2, 32)],
)  # fmt: skip
@pytest.mark.parametrize("window", [0, 19])
def test_q8_rows_kernel_matches_ref_and_the_q8_kernel(seq_lens, q_lens, H, K, D, window):
    """attention_rows_q8 (rows widened a span at a time, spans from 256 positions at K 8, D 128) against the numpy
    reference on the same q8_0 pages and against attention_q8's kernel; serial and threaded give the same bits."""
    from modelc.kernels.attention import attention_q8, attention_rows_q8
    from tests.kernels.attention.test_kv_q8 import _case

    kv, q, bt, qs, ps, _ = _case(seq_lens, q_lens, K, D, H, "q8_0", seed=sum(seq_lens) + window)
    kp, vp = kv.layer(0)
    args = (kp.data, kp.scales, vp.data, vp.scales)
    want = np.full_like(q, np.nan)
    ref.paged_attention(want, q, kp, vp, bt, qs, ps, 0.1, window)
    old = np.full_like(q, np.nan)
    attention_q8.paged_attention_q8(old, q, *args, kp.hot_of, kp.hot, vp.hot, 0, bt, qs, ps, 0.1, window)
    serial, threaded = np.full_like(q, np.nan), np.full_like(q, np.nan)
    attention_rows_q8.paged_attention_rows_q8(serial, q, *args, bt, qs, ps, 0.1, window)
    attention_rows_q8.paged_attention_rows_q8_parallel(threaded, q, *args, bt, qs, ps, 0.1, window)
    np.testing.assert_array_equal(serial, threaded)
    np.testing.assert_allclose(serial, want, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(serial, old, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("kv_dtype", ["float16", "q8_0"])
def test_peaked_rows_match_ref(kv_dtype, paged_case):
    """Scores spread over hundreds (a large q): most weights fall under exp_weight's cut and count as 0, as they
    would round away (the kernels stay fast: no subnormal products); the rows still match the numpy twin, spans and
    merge included."""
    from modelc.kernels.attention import attention_rows_q8
    from tests.kernels.attention.test_kv_q8 import _case

    if kv_dtype == "q8_0":
        kv, q, bt, qs, ps, _ = _case([600, 37], [1, 1], 8, 128, 32, "q8_0", seed=7)
        kp, vp = kv.layer(0)
        args = (kp.data, kp.scales, vp.data, vp.scales)
        fn = attention_rows_q8.paged_attention_rows_q8_parallel
    else:
        q, kp, vp, bt, qs, ps, _ = paged_case([600, 37], [1, 1], 32, 8, 128, kv_dtype, seed=7)
        args = (kp, vp)
        fn = attention_rows.paged_attention_rows_parallel
    q *= np.float32(40.0)
    want, out = np.full_like(q, np.nan), np.full_like(q, np.nan)
    ref.paged_attention(want, q, kp, vp, bt, qs, ps, 0.5, 0)
    fn(out, q, *args, bt, qs, ps, 0.5, 0)
    # scores of a few hundred carry float32 rounding of ~1e-4 (the twin sums in float64): outputs agree to ~2e-5
    np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-4)
