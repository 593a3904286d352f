from __future__ import annotations

import numpy as np
import pytest

from modelc.kernels.attention import attention, attention_blas
from modelc.kernels.reference import ref


@pytest.mark.parametrize("n,pos0,window", [(1, 0, 0), (5, 0, 0), (7, 20, 0), (9, 30, 4), (3, 0, 1)])
def test_causal_softmax_rows_matches_ref(n, pos0, window, tol):
    G = 3
    rng = np.random.default_rng(n + pos0)
    s = (rng.standard_normal((G * n, pos0 + n)) * 4).astype(np.float32)
    a, b = s.copy(), s.copy()
    attention_blas.causal_softmax_rows(a, n, pos0, window)
    ref.causal_softmax_rows(b, n, pos0, window)
    np.testing.assert_allclose(a, b, **tol["float32"])
    np.testing.assert_allclose(a.sum(1), 1.0, rtol=1e-5)
    for r in range(G * n):  # nothing after the row's own position
        assert not a[r, pos0 + r % n + 1 :].any()


CASES = [
    # (seq_lens, q_lens): one long prefill, a long chunk after a cached prefix, long + decodes + short chunk
    ([100], [100]),
    ([130], [80]),
    ([90, 5, 33, 40], [70, 1, 1, 5]),
    ([64, 70], [64, 70]),
]


@pytest.mark.parametrize("seq_lens,q_lens", CASES)
@pytest.mark.parametrize("kv_dtype", ["float32", "float16"])
@pytest.mark.parametrize("window", [0, 24])
def test_auto_with_blas_prefill_matches_ref(seq_lens, q_lens, kv_dtype, window, tol, monkeypatch, paged_case):
    monkeypatch.setattr(attention_blas, "ROW_TILE", 32)  # several row tiles per sequence
    q, kp, vp, bt, qs, ps, _ = paged_case(seq_lens, q_lens, 8, 2, 16, kv_dtype, seed=sum(seq_lens))
    out = np.full_like(q, np.nan)
    want = np.full_like(q, np.nan)
    attention.paged_attention_auto(out, q, kp, vp, bt, qs, ps, 0.25, window)
    ref.paged_attention(want, q, kp, vp, bt, qs, ps, 0.25, window)
    assert not np.isnan(out).any()
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
