from __future__ import annotations

import numpy as np
import pytest

from modelc.kernels.attention import attention, kv_write
from modelc.kernels.reference import ref

Z = 16


def _dense_attention(q, keys, vals, pos0, scale):
    """q (n, H, D) rows at positions pos0.., keys/vals (L, K, D) for positions 0..L-1: plain causal attention."""
    n, H, D = q.shape
    G = H // keys.shape[1]
    out = np.zeros_like(q, dtype=np.float64)
    for i in range(n):
        p = pos0 + i
        for h in range(H):
            sc = keys[: p + 1, h // G].astype(np.float64) @ q[i, h] * scale
            w = np.exp(sc - sc.max())
            out[i, h] = (w / w.sum()) @ vals[: p + 1, h // G]
    return out


CASES = [
    # (seq_lens, q_lens, H, K, D): prefill, chunk after cached prefix, decode batch, mixed, MHA, one head
    ([17], [17], 4, 2, 16),
    ([40], [9], 4, 2, 16),
    ([5, 33, 16, 1], [1, 1, 1, 1], 8, 2, 32),
    ([20, 3, 50], [20, 1, 7], 4, 4, 8),
    ([1], [1], 1, 1, 4),
    ([64], [64], 6, 3, 64),
]


@pytest.mark.parametrize("seq_lens,q_lens,H,K,D", CASES)
@pytest.mark.parametrize("kv_dtype", ["float32", "float16"])
def test_paged_attention_matches_ref_and_dense(seq_lens, q_lens, H, K, D, kv_dtype, tol, paged_case):
    q, kp, vp, bt, qs, ps, dense = paged_case(seq_lens, q_lens, H, K, D, kv_dtype, seed=len(seq_lens) * 31 + D)
    scale = 1.0 / np.sqrt(D)
    out = np.full_like(q, np.nan)
    want = np.full_like(q, np.nan)
    attention.paged_attention(out, q, kp, vp, bt, qs, ps, scale, 0)
    ref.paged_attention(want, q, kp, vp, bt, qs, ps, scale, 0)
    assert not np.isnan(out).any()
    np.testing.assert_allclose(out, want, **tol["float32"])
    par = np.full_like(q, np.nan)
    attention.paged_attention_parallel(par, q, kp, vp, bt, qs, ps, scale, 0)
    np.testing.assert_allclose(par, out, **tol["float32"])  # fastmath: summation order may differ
    for s in range(len(seq_lens)):
        rows = slice(qs[s], qs[s + 1])
        k, v = dense[s]
        np.testing.assert_allclose(want[rows], _dense_attention(q[rows], k, v, int(ps[s]), scale), rtol=1e-5, atol=1e-5)


def test_paged_attention_window(tol, paged_case):
    q, kp, vp, bt, qs, ps, dense = paged_case([37], [37], 4, 2, 8, "float32", seed=5)
    out = np.full_like(q, np.nan)
    want = np.full_like(q, np.nan)
    attention.paged_attention(out, q, kp, vp, bt, qs, ps, 0.3, 8)
    ref.paged_attention(want, q, kp, vp, bt, qs, ps, 0.3, 8)
    np.testing.assert_allclose(out, want, **tol["float32"])
    # row 36 sees positions 29..36 only
    k, v = dense[0]
    sub = _dense_attention(q[36:37], k[29:], v[29:], 7, 0.3)
    np.testing.assert_allclose(out[36:37], sub, rtol=1e-5, atol=1e-5)


def test_paged_attention_empty_batch():
    q = np.zeros((0, 2, 8), np.float32)
    out = np.zeros_like(q)
    kp = np.zeros((1, Z, 1, 8), np.float32)
    attention.paged_attention(
        out, q, kp, kp.copy(), np.zeros((0, 1), np.int32), np.zeros(1, np.int32), np.zeros(0, np.int32), 1.0, 0
    )
    assert out.shape == (0, 2, 8)


@pytest.mark.parametrize("kv_dtype", ["float32", "float16"])
def test_kv_write_matches_ref(kv_dtype):
    rng = np.random.default_rng(2)
    store = np.uint16 if kv_dtype == "float16" else np.float32
    P, K, D, T = 4, 2, 8, 11
    k = rng.standard_normal((T, K, D)).astype(np.float32)
    v = rng.standard_normal((T, K, D)).astype(np.float32)
    slots = rng.permutation(P * Z)[:T].astype(np.int64)
    slots[3] = -1  # padding rows are skipped
    canary = np.array(np.nan, np.float32) if store is np.float32 else np.uint16(0x7E00)
    a = [np.full((P, Z, K, D), canary, store) for _ in range(2)]
    b = [np.full((P, Z, K, D), canary, store) for _ in range(2)]
    kv_write.kv_write(a[0], a[1], k, v, slots)
    ref.kv_write(b[0], b[1], k, v, slots)
    np.testing.assert_array_equal(a[0].view(np.uint8), b[0].view(np.uint8))
    np.testing.assert_array_equal(a[1].view(np.uint8), b[1].view(np.uint8))
    for t in range(T):
        if slots[t] < 0:
            continue
        got = a[0][slots[t] // Z, slots[t] % Z]
        got = got.view(np.float16).astype(np.float32) if store is np.uint16 else got
        np.testing.assert_allclose(got, k[t], rtol=1e-3 if store is np.uint16 else 0)
    written = np.zeros(P * Z, bool)
    written[slots[slots >= 0]] = True
    untouched = a[0].reshape(P * Z, K * D)[~written]
    assert (untouched.view(np.uint8) == np.full(K * D, canary, store).view(np.uint8)).all()


def test_auto_dispatch_matches_serial(tol, paged_case):
    import numba

    q, kp, vp, bt, qs, ps, _ = paged_case([600, 3], [1, 3], 4, 2, 16, "float32", seed=11)
    a, b = np.full_like(q, np.nan), np.full_like(q, np.nan)
    attention.paged_attention(a, q, kp, vp, bt, qs, ps, 0.25, 0)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        attention.paged_attention_auto(b, q, kp, vp, bt, qs, ps, 0.25, 0)
    finally:
        numba.set_num_threads(before)
    np.testing.assert_allclose(b, a, **tol["float32"])


@pytest.mark.parametrize("n", [1, 7, 8, 9, 17, 40])
def test_row_max_is_max_wherever_it_lies(n):
    from numba import njit

    from modelc.kernels.attention.attention_parts import _row_max

    f = njit(lambda x: _row_max(x))
    rng = np.random.default_rng(n)
    for at in range(n):
        x = rng.standard_normal(n).astype(np.float32)
        x[at] = 9.0
        assert f(x) == np.float32(9.0)
