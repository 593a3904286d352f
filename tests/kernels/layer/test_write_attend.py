"""decode_layer.write_attend (a decode layer's KV write and attention, float32 / fp16 or plain q8_0 pages) against
the numpy twins (ref.kv_write, ref.paged_attention on the same pages), compiled inside a numba caller (the overload
the decode layers take) and called from Python, serial and threaded. tests/models/test_decode_layer.py checks the
decode layers on each page type against the forward's general path, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from modelc.cache.kv_pages import KVPages
from modelc.kernels.layer import decode_layer
from modelc.kernels.reference import ref
from tests.kernels.attention.test_kv_q8 import _case as kv_case

Z = 16


@njit(cache=False)  # a test helper, not cached: pytest may import this module under another name
def _in_numba(k_pages, v_pages, k_scales, v_scales, k, v, slots, out, q, block_tables, q_start, pos_start, scale,
              window, parallel):  # fmt: skip
    decode_layer.write_attend(k_pages, v_pages, k_scales, v_scales, k, v, slots, out, q, block_tables, q_start,
                              pos_start, scale, window, parallel)  # fmt: skip


def _case(lens: list[int], H: int, K: int, D: int, kv_dtype: str, seed: int):
    """A one-layer cache holding every position of each sequence (test_kv_q8._case), each sequence's last position
    to be written again (k, v at its slot) and attended from by q (a decode step: one row per sequence)."""
    kv, q, bt, qs, ps, _ = kv_case(lens, [1] * len(lens), K, D, H, kv_dtype, seed=seed, window=0)
    rng = np.random.default_rng(seed + 1)
    k, v = rng.standard_normal((2, len(lens), K, D)).astype(np.float32)
    last = np.array(lens) - 1
    slots = bt[np.arange(len(lens)), last // Z].astype(np.int64) * Z + last % Z
    return kv, k, v, slots, q, bt, qs, ps


def _arrays(kv: KVPages) -> tuple:
    """write_attend's page arguments for layer 0 (a q8_0 cache's int8 pages and scales; else placeholder scales)."""
    if kv.ks is None:
        return kv.k[0], kv.v[0], decode_layer.NO_SCALES[0], decode_layer.NO_SCALES[0]
    return kv.k[0], kv.v[0], kv.ks[0], kv.vs[0]


@pytest.mark.parametrize(
    ("lens", "H", "K", "D"),
    [([37], 32, 4, 64), ([15, 16, 17, 40, 3], 32, 4, 64), ([600], 16, 8, 128), ([300, 20, 530], 8, 8, 128),
     ([70], 6, 2, 32)],
)  # fmt: skip
@pytest.mark.parametrize("kv_dtype", ["float32", "float16", "q8_0"])
def test_write_attend_matches_the_numpy_twins(lens, H, K, D, kv_dtype) -> None:
    """One token per sequence (a decode step, one stream or several in lockstep), short rows and rows of 2+ spans
    (600 positions at K 8, D 128: 256 a span in fp16, 128 in q8_0's widened rows)."""
    want_kv, k, v, slots, q, bt, qs, ps = _case(lens, H, K, D, kv_dtype, seed=sum(lens) + D)
    want = np.full_like(q, np.nan)
    kp, vp = want_kv.layer(0)
    ref.kv_write(kp, vp, k, v, slots)
    ref.paged_attention(want, q, kp, vp, bt, qs, ps, 0.125, 0)
    outs = []
    # float32 pages take the same overload branch as fp16 ones: compiled in a caller for fp16 and q8_0 only (a
    # compile each)
    for fn in (_in_numba if kv_dtype != "float32" else decode_layer.write_attend, decode_layer.write_attend):
        for parallel in (False, True):
            kv = _case(lens, H, K, D, kv_dtype, seed=sum(lens) + D)[0]
            out = np.full_like(q, np.nan)
            fn(*_arrays(kv), k, v, slots, out, q, bt, qs, ps, np.float32(0.125), 0, parallel)
            for got, wanted in zip((kv.k, kv.v, kv.ks, kv.vs), (want_kv.k, want_kv.v, want_kv.ks, want_kv.vs),
                                   strict=True):  # fmt: skip
                if got is not None:
                    np.testing.assert_array_equal(got, wanted)  # the same rows written, bit for bit
            np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-6)
            outs.append(out)
    # serial or threaded: the same bits (the span split never depends on the thread count). Inlined into a numba
    # caller, the q8_0 kernels may round differently from the Python-called ones (seen: 3e-7 at D 64): close only
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[2], outs[3])
    np.testing.assert_allclose(outs[0], outs[2], rtol=2e-5, atol=2e-6)


def test_write_attend_with_a_window() -> None:
    """A sliding-window layer's decode row on q8_0 pages: the window's positions only."""
    kv, k, v, slots, q, bt, qs, ps = _case([90], 4, 2, 32, "q8_0", seed=4)
    out, want = np.full_like(q, np.nan), np.full_like(q, np.nan)
    _in_numba(*_arrays(kv), k, v, slots, out, q, bt, qs, ps, np.float32(0.2), 19, True)
    ref.paged_attention(want, q, *kv.layer(0), bt, qs, ps, 0.2, 19)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-6)


def test_compiled_in_a_caller_it_keeps_the_warm_list():
    """The overload's impls call the module's dispatchers: numba builds no second dispatcher named like a kernel,
    which warm_list.snapshot() could not find again (it then keeps no warm list: a restart replays nothing)."""
    from modelc.kernels.runtime import warm_list

    for kv_dtype in ("float16", "q8_0"):
        kv, k, v, slots, q, bt, qs, ps = _case([20], 4, 2, 32, kv_dtype, seed=5)
        _in_numba(*_arrays(kv), k, v, slots, np.full_like(q, np.nan), q, bt, qs, ps, np.float32(0.2), 0, False)
    assert warm_list.snapshot() is not None
