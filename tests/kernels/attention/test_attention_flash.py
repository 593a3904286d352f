from __future__ import annotations

import numpy as np
import pytest

from modelc.kernels.attention import attention_blas, attention_flash
from modelc.kernels.reference import ref

CASES = [
    # (seq_len, q_len, H, K, D): a whole prompt (pos0 0), a chunk after cached positions, rows not a multiple of
    # the query block (R = 64 / G), positions not a multiple of BK, groups of 1, 2, 4, 8, 16, D 16 .. 128
    (70, 70, 32, 4, 64),
    (300, 64, 32, 8, 128),
    (37, 37, 4, 4, 16),
    (130, 9, 16, 1, 32),
    (100, 77, 4, 2, 16),
    (1, 1, 8, 1, 16),
]


@pytest.mark.parametrize("seq_len,q_len,H,K,D", CASES)
@pytest.mark.parametrize("kv_dtype", ["float32", "float16"])
@pytest.mark.parametrize("window", [0, 19])
def test_flash_prefill_matches_ref(seq_len, q_len, H, K, D, kv_dtype, window, tol, paged_case):
    q, kp, vp, bt, qs, ps, _ = paged_case([seq_len], [q_len], H, K, D, kv_dtype, seed=seq_len + D + window)
    assert attention_flash.supported(q, kp)
    scale = 1.0 / np.sqrt(D)
    want = np.full_like(q, np.nan)
    ref.paged_attention(want, q, kp, vp, bt, qs, ps, scale, window)
    got = np.full_like(q, np.nan)
    attention_flash.flash_prefill(got, q, kp, vp, bt[0], int(ps[0]), scale, window)
    np.testing.assert_allclose(got, want, **tol["float32"])
    blas = np.full_like(q, np.nan)
    attention_blas.attention_one_seq_blas(blas, q, kp, vp, bt[0], int(ps[0]), scale, window)
    np.testing.assert_allclose(got, blas, **tol["float32"])


@pytest.mark.parametrize("seq_len,q_len,H,K,D", [(300, 64, 32, 8, 128), (100, 77, 4, 2, 16), (70, 70, 32, 4, 64)])
@pytest.mark.parametrize("window", [0, 19])
def test_flash_prefill_q8_matches_ref_on_q8_pages(seq_len, q_len, H, K, D, window):
    """The q8_0 entry widens each block's int8 rows by their scales: the numpy reference's numbers on those pages,
    and attention_blas' (which gathers them dequantized)."""
    from tests.kernels.attention.test_kv_q8 import _case

    kv, q, bt, qs, ps, _ = _case([seq_len], [q_len], K, D, H, "q8_0", seed=seq_len + window)
    kp, vp = kv.layer(0)
    assert attention_flash.supported(q, kp)
    want = np.full_like(q, np.nan)
    ref.paged_attention(want, q, kp, vp, bt, qs, ps, 0.1, window)
    got = np.full_like(q, np.nan)
    attention_flash.prefill(got, q, kp, vp, bt[0], int(ps[0]), 0.1, window)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    blas = np.full_like(q, np.nan)
    attention_blas.attention_one_seq_blas(blas, q, kp, vp, bt[0], int(ps[0]), 0.1, window)
    np.testing.assert_allclose(got, blas, rtol=2e-5, atol=2e-6)


def test_supported_refuses_what_it_cannot_take(paged_case):
    q, kp, *_ = paged_case([20], [20], 12, 4, 16, "float32", seed=1)  # G = 3 does not divide 64
    assert not attention_flash.supported(q, kp)
    q, kp, *_ = paged_case([20], [20], 8, 2, 24, "float32", seed=1)  # D % 16 != 0
    assert not attention_flash.supported(q, kp)
    q, kp, *_ = paged_case([20], [20], 8, 2, 16, "float32", seed=1)
    assert attention_flash.supported(q, kp) and not attention_flash.supported(q[:, :, ::2], kp)
    from tests.kernels.attention.test_kv_q8 import _case

    kv, q, *_ = _case([40], [40], 2, 16, 8, "mixed", seed=2)  # the mixed cache's hot window: attention_blas
    assert not attention_flash.supported(q, kv.layer(0)[0])


_FALLBACK = """
import numpy as np
from modelc.kernels.attention import attention_flash
from modelc.kernels.reference import ref
from modelc.kernels.runtime import cpu
from tests.kernels.conftest import make_paged_case
worst = 0.0
for kv in ("float32", "float16"):
    q, kp, vp, bt, qs, ps, _ = make_paged_case([90], [40], 16, 2, 32, kv, seed=4)
    want = np.empty_like(q)
    ref.paged_attention(want, q, kp, vp, bt, qs, ps, 0.2, 0)
    got = np.empty_like(q)
    attention_flash.flash_prefill(got, q, kp, vp, bt[0], int(ps[0]), 0.2, 0)
    worst = max(worst, float(np.abs(got - want).max() / np.abs(want).max()))
print(cpu.HAS_AVX2, cpu.HAS_VNNI, worst)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "env",
    [
        {"MODELC_NO_AMX": "1"},
        {"MODELC_NO_AVX512": "1", "MODELC_NO_VNNI": "1", "MODELC_NO_AMX": "1"},
        {"MODELC_NO_AVX2": "1"},
    ],
)
def test_fallback_paths(env):
    """The 16-lane tiles lowered without AVX-512 (and without AVX2) give the same numbers."""
    from tests.kernels.fallback import fallback_worst

    assert fallback_worst(_FALLBACK, env, timeout=900) < 1e-5
