"""kernels.attention.attention_ext (soft-capping, sinks) against its numpy twin and against the plain kernel."""

from __future__ import annotations

import numpy as np
import pytest

from modelc.kernels.attention import attention_ext
from modelc.kernels.reference import ref, ref_attention_ext


def _case(dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    H, K, D, Z, P = 4, 2, 16, 16, 6
    kp = rng.standard_normal((P, Z, K, D)).astype(np.float32)
    vp = rng.standard_normal((P, Z, K, D)).astype(np.float32)
    if dtype == np.uint16:
        kp, vp = kp.astype(np.float16).view(np.uint16), vp.astype(np.float16).view(np.uint16)
    # two sequences: a 5-row chunk starting at position 20, and one decode row at position 37
    block_tables = np.array([[3, 1, 0], [2, 4, 5]], np.int32)
    q_start = np.array([0, 5, 6], np.int32)
    pos_start = np.array([20, 37], np.int32)
    q = rng.standard_normal((6, H, D)).astype(np.float32)
    return q, kp, vp, block_tables, q_start, pos_start


@pytest.mark.parametrize("dtype", [np.float32, np.uint16])
@pytest.mark.parametrize("window", [0, 7])
@pytest.mark.parametrize("softcap,sinks", [(0.0, False), (1.5, False), (0.0, True), (3.0, True)])
def test_matches_numpy_twin(dtype, window, softcap, sinks):
    q, kp, vp, bt, qs, ps = _case(dtype)
    s = np.random.default_rng(1).standard_normal(q.shape[1]).astype(np.float32) if sinks else np.zeros(0, np.float32)
    want, got = np.empty_like(q), np.empty_like(q)
    ref_attention_ext.paged_attention_ext(want, q, kp, vp, bt, qs, ps, 0.25, window, softcap, s)
    attention_ext.paged_attention_ext(got, q, kp, vp, bt, qs, ps, np.float32(0.25), window, softcap, s)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


def test_without_switches_equals_plain_attention():
    q, kp, vp, bt, qs, ps = _case()
    want, got = np.empty_like(q), np.empty_like(q)
    ref.paged_attention(want, q, kp, vp, bt, qs, ps, 0.25, 7)
    attention_ext.paged_attention_ext(got, q, kp, vp, bt, qs, ps, np.float32(0.25), 7, 0.0, np.zeros(0, np.float32))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


def test_sinks_only_shrink_the_weights():
    """A sink takes probability mass from every key: the output is the plain one times sum(w) / (sum(w) + e^sink)."""
    q, kp, vp, bt, qs, ps = _case()
    plain, sunk = np.empty_like(q), np.empty_like(q)
    none = np.zeros(0, np.float32)
    ref_attention_ext.paged_attention_ext(plain, q, kp, vp, bt, qs, ps, 0.25, 0, 0.0, none)
    ref_attention_ext.paged_attention_ext(sunk, q, kp, vp, bt, qs, ps, 0.25, 0, 0.0, np.full(4, 50.0, np.float32))
    assert np.abs(sunk).max() < 1e-6 * np.abs(plain).max() + 1e-12  # a huge sink swallows everything
