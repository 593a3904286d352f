"""q8_0 / mixed KV pages: write and attention kernels against their numpy twins (ref_kv_q8.py)."""

from __future__ import annotations

import numpy as np
import pytest

from modelc.cache.kv_pages import KVPages
from modelc.kernels.attention import attention
from modelc.kernels.attention.attention_blas import attention_one_seq_blas
from modelc.kernels.attention.attention_q8 import paged_attention_q8, paged_attention_q8_parallel
from modelc.kernels.attention.kv_q8 import gather_q8, kv_write_q8
from modelc.kernels.attention.kv_write import write_pages
from modelc.kernels.reference import ref, ref_kv_q8

Z = 16


def _case(seq_lens, q_lens, K, D, H, kv_dtype, seed, window=24, spare_hot=3):
    """KVPages(1 layer) holding random rows for every sequence, written by the numba kernel; hot slots on."""
    rng = np.random.default_rng(seed)
    blocks = [(n + Z - 1) // Z for n in seq_lens]
    P = sum(blocks) + 2
    ids = rng.permutation(P)
    bt = np.zeros((len(seq_lens), max(blocks)), np.int32)
    kv = KVPages(1, P, K, D, kv_dtype, window=window, num_hot=P - spare_hot if kv_dtype == "mixed" else None)
    i = 0
    dense = []
    for s, (n, nb) in enumerate(zip(seq_lens, blocks, strict=True)):
        bt[s, :nb] = ids[i : i + nb]
        i += nb
        p = np.arange(n)
        slots = bt[s, p // Z].astype(np.int64) * Z + p % Z
        k = rng.standard_normal((n, K, D)).astype(np.float32)
        v = rng.standard_normal((n, K, D)).astype(np.float32)
        kv.prepare(slots)  # mixed: as many pages as there are hot slots get one, the rest stay int8
        write_pages(*kv.layer(0), k, v, slots)
        dense.append((k, v))
    qs = np.zeros(len(seq_lens) + 1, np.int32)
    qs[1:] = np.cumsum(q_lens)
    ps = np.array([n - m for n, m in zip(seq_lens, q_lens, strict=True)], np.int32)
    q = rng.standard_normal((int(qs[-1]), H, D)).astype(np.float32)
    return kv, q, bt, qs, ps, dense


@pytest.mark.parametrize("D", [16, 64])
def test_write_matches_ref_bit_for_bit(D):
    rng = np.random.default_rng(D)
    P, K, T = 4, 2, 21
    x = rng.standard_normal((2, T, K, D)).astype(np.float32) * 3
    x[0, 3] = 0.0  # an all-zero row: scale 0, no division by zero
    slots = rng.permutation(P * Z)[:T].astype(np.int64)
    slots[5] = -1  # padding is skipped
    nb = D // (32 if D % 32 == 0 else D)
    hot_of = np.array([1, -1, 0, -1], np.int32)
    got = [np.zeros((P, Z, K, D), np.int8), np.zeros((P, Z, K, nb), np.uint16)]
    got += [a.copy() for a in got]
    want = [a.copy() for a in got]
    hot = [np.full((2, Z, K, D), np.nan, np.float32) for _ in range(4)]
    kv_write_q8(got[0], got[1], got[2], got[3], hot_of, hot[0], hot[1], x[0], x[1], slots)
    ref_kv_q8.kv_write_q8(want[0], want[1], want[2], want[3], hot_of, hot[2], hot[3], x[0], x[1], slots)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(hot[0], hot[2])
    deq = ref_kv_q8.dequant_rows(got[0][slots // Z, slots % Z], got[1][slots // Z, slots % Z])
    keep = slots >= 0
    err = np.abs(deq[keep] - x[0][keep]).max(axis=-1)
    assert (err <= np.abs(x[0][keep]).max(axis=-1) / 127 * 0.51 + 1e-3).all()  # half a step (+ fp16 scale)
    out = np.full((T, K, D), np.nan, np.float32)
    table = np.arange(P, dtype=np.int32)
    gather_q8(out[:T], got[0], got[1], table, T)
    np.testing.assert_array_equal(out, ref_kv_q8.dequant_rows(got[0], got[1]).reshape(P * Z, K, D)[:T])


CASES = [([17], [17], 2, 16, 4), ([40], [9], 2, 32, 4), ([5, 33, 16, 1], [1, 1, 1, 1], 2, 32, 8),
         ([70, 3], [70, 1], 1, 64, 2)]  # fmt: skip


@pytest.mark.parametrize("seq_lens,q_lens,K,D,H", CASES)
@pytest.mark.parametrize("kv_dtype", ["q8_0", "mixed"])
def test_attention_matches_ref(seq_lens, q_lens, K, D, H, kv_dtype, tol):
    kv, q, bt, qs, ps, dense = _case(seq_lens, q_lens, K, D, H, kv_dtype, seed=sum(seq_lens) + D)
    kp, vp = kv.layer(0)
    scale = 1.0 / np.sqrt(D)
    want = np.full_like(q, np.nan)
    ref.paged_attention(want, q, kp, vp, bt, qs, ps, scale, 0)
    args = (kp.data, kp.scales, vp.data, vp.scales, kp.hot_of, kp.hot, vp.hot, kp.window, bt, qs, ps, scale, 0)
    for fn in (paged_attention_q8, paged_attention_q8_parallel):
        out = np.full_like(q, np.nan)
        fn(out, q, *args)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
    out = np.full_like(q, np.nan)
    attention.paged_attention_auto(out, q, kp, vp, bt, qs, ps, scale, 0)  # BLAS for the 64+ row chunk
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
    # close to attention over the exact f32 rows (int8 costs ~1e-2 here)
    f32 = np.full_like(q, np.nan)
    for s, (k, v) in enumerate(dense):
        rows = slice(qs[s], qs[s + 1])
        kf = np.zeros((bt.shape[1] * 0 + kv.num_blocks, Z, K, D), np.float32)
        vf = np.zeros_like(kf)
        p = np.arange(len(k))
        kf[bt[s, p // Z], p % Z], vf[bt[s, p // Z], p % Z] = k, v
        ref.paged_attention(f32[rows], q[rows], kf, vf, bt[s : s + 1], np.array([0, qs[s + 1] - qs[s]], np.int32),
                            ps[s : s + 1], scale, 0)  # fmt: skip
    assert np.abs(want - f32).max() < 0.05


def test_mixed_reads_the_recent_window_in_f32():
    """With every page hot and the window covering everything, mixed equals f32 attention."""
    kv, q, bt, qs, ps, dense = _case([40], [40], 2, 32, 4, "mixed", seed=3, window=1000, spare_hot=0)
    kv2, *_ = _case([40], [40], 2, 32, 4, "float32", seed=3)
    assert (kv.hot_of[bt[0, :3]] >= 0).all()
    a, b = np.full_like(q, np.nan), np.full_like(q, np.nan)
    attention.paged_attention_auto(a, q, *kv.layer(0), bt, qs, ps, 0.2, 0)
    attention.paged_attention_auto(b, q, *kv2.layer(0), bt, qs, ps, 0.2, 0)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n,m", [(100, 80), (300, 290)])  # 290 rows: two sgemm row tiles
def test_blas_prefill_with_q8_pages_matches_ref(n, m):
    kv, q, bt, qs, ps, _ = _case([n], [m], 2, 32, 4, "mixed", seed=9, spare_hot=8)
    kp, vp = kv.layer(0)
    want, out = np.full_like(q, np.nan), np.full_like(q, np.nan)
    ref.paged_attention(want, q, kp, vp, bt, qs, ps, 0.2, 0)
    attention_one_seq_blas(out, q, kp, vp, bt[0], int(ps[0]), 0.2, 0)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)


def test_kv_bytes_ratio_and_hot_slots():
    f32 = KVPages.bytes_per_block(22, 4, 64, "float32")
    assert KVPages.bytes_per_block(22, 4, 64, "q8_0") / f32 == pytest.approx(34 / 128)  # <= 0.27
    kv = KVPages(2, 200, 4, 64, "q8_0")
    assert kv.nbytes / KVPages(2, 200, 4, 64, "float32").nbytes == pytest.approx(34 / 128)
    m = KVPages(1, 8, 1, 32, "mixed", window=16, num_hot=3)
    m.prepare(np.arange(0, 64, dtype=np.int64))  # pages 0..3 start: three get hot slots
    assert (m.hot_of[:3] >= 0).all() and m.hot_of[3] == -1
    m.retire(np.arange(8, dtype=np.int32), 48)  # pages whose last row <= 32 are out of every future window
    assert (m.hot_of[:2] == -1).all() and m.hot_of[2] >= 0
    m.release(np.array([2]))
    assert (m.hot_of == -1).all() and len(m._free_hot) == 3
