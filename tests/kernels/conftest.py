"""Shared tolerances for kernel-vs-reference tests (one place, per dtype)."""

from __future__ import annotations

import numpy as np
import pytest

from modelc.kernels.attention import kv_write

TOLERANCES = {
    "float32": {"rtol": 2e-5, "atol": 2e-6},
    "float16": {"rtol": 2e-3, "atol": 2e-3},
}


@pytest.fixture
def tol():
    return TOLERANCES


Z = 16


def make_paged_case(seq_lens, q_lens, H, K, D, kv_dtype, seed):
    """Random pages holding every sequence's KV; returns kernel inputs + the dense per-seq K/V."""
    rng = np.random.default_rng(seed)
    S = len(seq_lens)
    blocks = [(L + Z - 1) // Z for L in seq_lens]
    P = sum(blocks) + 3
    page_ids = rng.permutation(P)
    B = max(blocks, default=1)
    bt = np.zeros((S, max(B, 1)), np.int32)
    i = 0
    for s, nb in enumerate(blocks):
        bt[s, :nb] = page_ids[i : i + nb]
        i += nb
    store = np.uint16 if kv_dtype == "float16" else np.float32
    kp = np.zeros((P, Z, K, D), store)
    vp = np.zeros((P, Z, K, D), store)
    dense = []
    for s, L in enumerate(seq_lens):
        k = rng.standard_normal((L, K, D)).astype(np.float32)
        v = rng.standard_normal((L, K, D)).astype(np.float32)
        p = np.arange(L)
        slots = (bt[s, p // Z].astype(np.int64) * Z + p % Z).astype(np.int64)
        kv_write.kv_write(kp, vp, k, v, slots)
        if kv_dtype == "float16":
            k, v = k.astype(np.float16).astype(np.float32), v.astype(np.float16).astype(np.float32)
        dense.append((k, v))
    q_start = np.zeros(S + 1, np.int32)
    q_start[1:] = np.cumsum(q_lens)
    pos_start = np.array([L - n for L, n in zip(seq_lens, q_lens, strict=True)], np.int32)
    q = rng.standard_normal((int(q_start[-1]), H, D)).astype(np.float32)
    return q, kp, vp, bt, q_start, pos_start, dense


@pytest.fixture
def paged_case():
    """make_paged_case(seq_lens, q_lens, H, K, D, kv_dtype, seed) -> (q, k_pages, v_pages, block_tables,
    q_start, pos_start, dense per-seq (K, V))."""
    return make_paged_case
