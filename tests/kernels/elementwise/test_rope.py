from __future__ import annotations

import math

import numpy as np
import pytest

from modelc.errors import UnsupportedError
from modelc.kernels.elementwise import rope
from modelc.kernels.reference import ref


@pytest.mark.parametrize("T,H,D,R", [(1, 1, 2, 2), (5, 3, 16, 16), (17, 4, 64, 64), (4, 2, 32, 16), (0, 2, 8, 8)])
@pytest.mark.parametrize("neox", [False, True])
def test_rope_matches_ref(T, H, D, R, neox, tol):
    rng = np.random.default_rng(T + H + D)
    x = rng.standard_normal((T, H, D)).astype(np.float32)
    pos = rng.integers(0, 4096, T).astype(np.int32)
    inv = rope.rope_inv_freq(R, 10000.0)
    a, b = x.copy(), x.copy()
    rope.rope(a, pos, inv, neox)
    ref.rope(b, pos, inv, neox)
    np.testing.assert_allclose(a, b, **tol["float32"])
    np.testing.assert_array_equal(a[..., R:], x[..., R:])  # dims past the rotary part untouched
    # rotation keeps each pair's norm
    np.testing.assert_allclose(np.linalg.norm(a, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-5)


def test_rope_neox_vs_interleaved_are_permutations():
    # interleaved rope on x equals neox rope on the de-interleaved x (the GGUF Q/K permutation)
    rng = np.random.default_rng(0)
    D = 16
    x = rng.standard_normal((3, 2, D)).astype(np.float32)
    pos = np.array([0, 5, 100], np.int32)
    inv = rope.rope_inv_freq(D, 10000.0)
    perm = np.concatenate([np.arange(0, D, 2), np.arange(1, D, 2)])
    a = x.copy()
    rope.rope(a, pos, inv, False)
    b = x[..., perm].copy()
    rope.rope(b, pos, inv, True)
    np.testing.assert_allclose(a[..., perm], b, rtol=1e-6, atol=1e-6)


def test_rope_position_zero_is_identity():
    x = np.random.default_rng(3).standard_normal((2, 2, 8)).astype(np.float32)
    a = x.copy()
    rope.rope(a, np.zeros(2, np.int32), rope.rope_inv_freq(8, 10000.0), True)
    np.testing.assert_array_equal(a, x)


def test_inv_freq_scaling():
    base = rope.rope_inv_freq(64, 500000.0)
    np.testing.assert_allclose(base[1], 500000.0 ** (-2 / 64))
    lin = rope.rope_inv_freq(64, 500000.0, {"type": "linear", "factor": 4.0})
    np.testing.assert_allclose(lin, base / 4)
    sc = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    l3 = rope.rope_inv_freq(64, 500000.0, sc)
    wl = 2 * math.pi / base
    # high frequencies (short wavelengths) unchanged, low frequencies divided by factor
    np.testing.assert_allclose(l3[wl < 8192 / 4], base[wl < 8192 / 4])
    np.testing.assert_allclose(l3[wl > 8192], base[wl > 8192] / 8)
    mid = (wl >= 2048) & (wl <= 8192)
    assert mid.any()
    assert np.all(l3[mid] <= base[mid]) and np.all(l3[mid] >= base[mid] / 8)
    assert np.array_equal(rope.rope_inv_freq(8, 1e4, {"rope_type": "default"}), rope.rope_inv_freq(8, 1e4))
    with pytest.raises(UnsupportedError):
        rope.rope_inv_freq(8, 1e4, {"rope_type": "mystery"})
