from __future__ import annotations

import numpy as np
import pytest

from modelc.kernels import attention, attention_rows, ref

CASES = [
    # (seq_lens, q_lens, H, K, D): decode batch at chunk edges (15, 16, 17, 32, 33 positions), a prefill,
    # a chunk after a cached prefix, groups of 1, 3, 5 (4-head blocks and their remainder), 8, D 16..128
    ([15, 16, 17, 32, 33], [1, 1, 1, 1, 1], 32, 4, 64),
    ([40], [40], 6, 2, 16),
    ([70], [9], 5, 1, 32),
    ([3, 50, 20], [1, 7, 20], 4, 4, 128),
    ([1], [1], 1, 1, 16),
    ([161], [1], 16, 2, 80),
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


def test_sums16_finishes_16_dots_in_lane_order():
    from numba import njit

    from modelc.kernels.qdot import load_f32x16, store_f32x16

    @njit
    def sums(a, out):
        store_f32x16(out, 0, attention_rows.sums16_f32x16(
            load_f32x16(a, 0), load_f32x16(a, 16), load_f32x16(a, 32), load_f32x16(a, 48),
            load_f32x16(a, 64), load_f32x16(a, 80), load_f32x16(a, 96), load_f32x16(a, 112),
            load_f32x16(a, 128), load_f32x16(a, 144), load_f32x16(a, 160), load_f32x16(a, 176),
            load_f32x16(a, 192), load_f32x16(a, 208), load_f32x16(a, 224), load_f32x16(a, 240)))  # fmt: skip

    a = np.random.default_rng(3).integers(-50, 50, 256).astype(np.float32)
    out = np.empty(16, np.float32)
    sums(a, out)
    np.testing.assert_array_equal(out, a.reshape(16, 16).sum(axis=1))


def test_dispatch_picks_rows_where_it_applies(paged_case):
    q, kp, vp, *_ = paged_case([20], [1], 4, 2, 16, "float32", seed=1)
    out = np.empty_like(q)
    assert attention.dense_kernel(out, q, kp, False) is attention_rows.paged_attention_rows
    q24, kp24, *_ = paged_case([20], [2], 4, 2, 24, "float32", seed=1)  # D % 16 != 0
    assert attention.dense_kernel(np.empty_like(q24), q24, kp24, True) is attention.paged_attention_parallel
    strided = np.zeros((2, 4, 32), np.float32)[:, :, ::2]
    assert attention.dense_kernel(np.empty_like(q), strided, kp, False) is attention.paged_attention
