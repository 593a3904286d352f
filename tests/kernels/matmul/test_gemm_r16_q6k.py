"""gemm_r16_q6k: Q6_K weights repacked into 16 interleaved rows, against the numpy twins and gguf's dequantizer."""

from __future__ import annotations

import numpy as np
import pytest

from modelc.ir import DataType
from modelc.kernels.matmul import gemm_r16, gemm_r16_q6k, linear, plan
from modelc.kernels.matmul.gemm_random import random_tensor
from modelc.kernels.quant import quant
from modelc.kernels.reference import ref_linear, ref_r16, ref_r16_q6k
from tests.kernels.r16_cases import act, assert_close, assert_linear_matches_twin, r16_matmul, twin, with_r16

Q6_K = DataType.Q6_K


def _weight(n: int, c: int, seed: int):
    return linear.prepare_weight(random_tensor(Q6_K, n, c, np.random.default_rng(seed)))


def test_repack_is_a_permutation_that_dequantizes_as_gguf_does():
    gguf_quants = pytest.importorskip("gguf.quants")
    import gguf

    w = _weight(32, 512, 1)
    r = gemm_r16.repack(w.blocks, Q6_K)
    assert r.shape == (2, 2 * gemm_r16_q6k.BYTES)
    np.testing.assert_array_equal(r, ref_r16.repack(w.blocks, Q6_K))  # the numba loop and its numpy twin
    assert sorted(r.reshape(-1).tolist()) == sorted(np.asarray(w.blocks).reshape(-1).tolist())
    want = gguf_quants.dequantize(np.asarray(w.blocks), gguf.GGMLQuantizationType.Q6_K).reshape(32, 512)
    np.testing.assert_array_equal(ref_r16_q6k.dequantize(r), want)  # the layout read back, value for value
    np.testing.assert_array_equal(linear.dequantize(random_tensor(Q6_K, 32, 512, np.random.default_rng(1))), want)


@pytest.mark.parametrize(("n", "c", "t"), [(16, 256, 1), (48, 512, 1), (32, 256, 2), (64, 2048, 8), (16, 768, 33)])
def test_kernel_matches_the_quantized_activation_twin(n, c, t):
    rng = np.random.default_rng(n * 7 + c + t)
    w = _weight(n, c, n + c + t)
    x = rng.standard_normal((t, c)).astype(np.float32)  # (T, C)
    assert_close(r16_matmul(w, x), twin(w, x))


def test_extreme_codes_and_scales_stay_exact():
    """Every code 63 with scale -128 and activations at +-127: the integer sums at their largest."""
    w = _weight(16, 256, 3)
    b = np.asarray(w.blocks).copy()
    b[:, :192] = 0xFF
    b[:, 192:208] = 0x80  # int8 -128
    w = type(w)(w.dtype, w.rows, w.cols, b, None)
    x = np.where(np.arange(256) % 3 == 0, -1.0, 1.0).astype(np.float32).reshape(1, 256)
    ref, out = np.empty((1, 16), np.float32), np.empty((1, 16), np.float32)
    ref_linear.matmul_qact(ref, x, w)
    gemm_r16.qmatmul_r16(out, *act(x), gemm_r16.repack(b, Q6_K), quant.KIND[Q6_K])
    np.testing.assert_allclose(out, ref, rtol=1e-6)


@pytest.mark.parametrize("t", [1, 4, 40])
def test_linear_runs_r16_at_every_t_when_the_weight_carries_it(t):
    rng = np.random.default_rng(t)
    w0 = _weight(32, 512, t)
    w = with_r16(w0)
    assert plan.plan_matmul(w, t) is plan.Path.R16
    assert_linear_matches_twin(w, w0, t, rng)


_FALLBACK_CHECK = """
import numpy as np
from modelc.ir import DataType
from modelc.kernels.matmul import gemm_r16, linear
from modelc.kernels.quant import quant
from modelc.kernels.reference import ref_linear
from modelc.kernels.simd import qdot
from modelc.kernels.matmul.gemm_random import random_tensor
rng = np.random.default_rng(0)
worst = 0.0
for t in (1, 2, 8, 33):
    w = linear.prepare_weight(random_tensor(DataType.Q6_K, 48, 512, rng))  # t = 1: a pair of groups and one alone
    x = rng.standard_normal((t, 512)).astype(np.float32)
    xq = np.empty((t, 512), np.int8); xd = np.empty((t, 16), np.float32); xs = np.empty((t, 32), np.float32)
    quant.quantize_act(xq, xd, xs, x)
    out = np.full((t, 48), np.nan, np.float32)
    gemm_r16.qmatmul_r16(out, xq, xd, xs, gemm_r16.repack(w.blocks, DataType.Q6_K), quant.KIND[DataType.Q6_K])
    want = np.empty_like(out)
    ref_linear.matmul_qact(want, x, w)
    worst = max(worst, float(np.abs(out - want).max() / np.abs(want).max()))
print(qdot.HAS_AVX2, qdot.HAS_VNNI, worst)
"""


@pytest.mark.slow
@pytest.mark.parametrize("env", [{"MODELC_NO_AVX512": "1"}, {"MODELC_NO_VNNI": "1"}])
def test_fallback_paths(env: dict[str, str]) -> None:
    """The 256-bit VNNI and AVX2 paths give the same numbers at T = 1, 2, 8, 33."""
    from tests.kernels.fallback import fallback_worst

    assert fallback_worst(_FALLBACK_CHECK, env, timeout=900) < 2e-6
