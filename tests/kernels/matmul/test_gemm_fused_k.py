"""gemm_fused_k.qmatvec_k (T=1 K-quant matvec) against its numpy twin ref_linear.matmul_qact."""

from __future__ import annotations

import numpy as np
import pytest

from modelc.ir import DataType, TensorData
from modelc.kernels.matmul import gemm_fused_k, linear
from modelc.kernels.matmul.gemm_random import random_tensor
from modelc.kernels.quant import quant
from modelc.kernels.reference import ref_linear

EXACT_QACT = 2e-5  # float summation order only: the int8 dots are exact
TYPES = ["Q4_K", "Q5_K", "Q6_K", "IQ4_XS"]  # the 256-element super-block types (IQ4_XS: qdot_iq.iq4xs_block)


def _case(name: str, n: int, c: int, seed: int):
    rng = np.random.default_rng(seed)
    w = linear.prepare_weight(random_tensor(DataType[name], n, c, rng))
    x = rng.standard_normal((1, c)).astype(np.float32)  # (1, C)
    return w, x


def _qmatvec_k(w: linear.Weight, x: np.ndarray) -> np.ndarray:
    c = x.shape[1]
    xq = np.empty((1, c), np.int8)  # (1, C)
    xd = np.empty((1, c // 32), np.float32)  # (1, C/32)
    xs = np.empty((1, c // 16), np.float32)  # (1, C/16)
    quant.quantize_act(xq, xd, xs, x)
    out = np.full((1, w.rows), np.nan, np.float32)  # (1, N)
    gemm_fused_k.qmatvec_k(out, xq, xd, xs, w.blocks, quant.KIND[w.dtype])
    return out


def _relerr(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def test_kinds_are_the_super_block_types() -> None:
    assert gemm_fused_k.KINDS == {quant.KIND[DataType[n]] for n in TYPES}


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize(("n", "c"), [(1, 256), (2, 256), (7, 512), (33, 2048), (64, 768), (101, 1280)])
def test_matches_quantized_activation_twin(name: str, n: int, c: int) -> None:
    w, x = _case(name, n, c, seed=n * 7 + c)
    want = np.empty((1, n), np.float32)
    ref_linear.matmul_qact(want, x, w)
    got = _qmatvec_k(w, x)
    assert np.isfinite(got).all()
    assert _relerr(got, want) < EXACT_QACT


@pytest.mark.parametrize("name", TYPES)
def test_each_row_is_its_own_dot(name: str) -> None:
    """Rows are paired inside the kernel: a row's result must not depend on its neighbour."""
    w, x = _case(name, 9, 512, seed=3)
    full = _qmatvec_k(w, x)
    for r in (0, 4, 8):
        row = TensorData((1, w.cols), w.dtype, w.blocks[r].copy())
        one = _qmatvec_k(linear.prepare_weight(row), x)
        np.testing.assert_allclose(one[0, 0], full[0, r], rtol=1e-5, atol=1e-6)


def test_read_only_weights() -> None:
    """mmap'd GGUF weights are read-only arrays (another numba signature)."""
    w, x = _case("Q4_K", 19, 512, seed=4)
    want = _qmatvec_k(w, x)
    ro = w.blocks.copy()
    ro.flags.writeable = False
    got = _qmatvec_k(linear.Weight(w.dtype, w.rows, w.cols, ro, None), x)
    np.testing.assert_array_equal(got, want)


def test_extreme_codes_and_scales() -> None:
    """All-ones bytes (top 6-bit scales/mins, all codes maximal) and saturated activations."""
    rng = np.random.default_rng(5)
    for name in TYPES:
        t = random_tensor(DataType[name], 5, 512, rng)
        raw = np.asarray(t.data).reshape(5, -1).copy()
        fp16 = {"Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,), "IQ4_XS": (0,)}[name]
        keep = np.zeros(raw.shape[1], bool)
        for b in range(2):  # keep the fp16 super-block scales; everything else 0xFF
            for off in fp16:
                keep[b * raw.shape[1] // 2 + off : b * raw.shape[1] // 2 + off + 2] = True
        raw[:, ~keep] = 0xFF
        w = linear.prepare_weight(type(t)(t.shape, t.dtype, raw.reshape(-1)))
        x = np.where(rng.random((1, 512)) < 0.5, -1.0, 1.0).astype(np.float32)  # (1, C)
        want = np.empty((1, 5), np.float32)
        ref_linear.matmul_qact(want, x, w)
        assert _relerr(_qmatvec_k(w, x), want) < EXACT_QACT, name


_FALLBACK_CHECK = """
import numpy as np
from modelc.ir import DataType
from modelc.kernels.matmul import gemm_fused_k, linear
from modelc.kernels.quant import quant
from modelc.kernels.reference import ref_linear
from modelc.kernels.simd import qdot, qdot_k
from modelc.kernels.matmul.gemm_random import random_tensor
assert not qdot_k.HAS_AVX512_VNNI
rng = np.random.default_rng(0)
worst = 0.0
for name in ["Q4_K", "Q5_K", "Q6_K", "IQ4_XS"]:
    w = linear.prepare_weight(random_tensor(DataType[name], 21, 512, rng))
    x = rng.standard_normal((1, 512)).astype(np.float32)
    xq = np.empty((1, 512), np.int8); xd = np.empty((1, 16), np.float32); xs = np.empty((1, 32), np.float32)
    quant.quantize_act(xq, xd, xs, x)
    out = np.full((1, 21), np.nan, np.float32)
    gemm_fused_k.qmatvec_k(out, xq, xd, xs, w.blocks, quant.KIND[w.dtype])
    want = np.empty_like(out)
    ref_linear.matmul_qact(want, x, w)
    worst = max(worst, float(np.abs(out - want).max() / np.abs(want).max()))
print(qdot.HAS_AVX2, qdot.HAS_VNNI, worst)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "env",
    [
        {"MODELC_NO_AVX512": "1"},
        {"MODELC_NO_VNNI": "1"},
        {"MODELC_NO_AVX2": "1"},
    ],
)
def test_fallback_paths(env: dict[str, str]) -> None:
    """The 256-bit VNNI, AVX2 and portable LLVM IR paths give the same numbers."""
    from tests.kernels.fallback import fallback_worst

    assert fallback_worst(_FALLBACK_CHECK, env, timeout=600) < EXACT_QACT
