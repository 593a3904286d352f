"""gemm_fused_grid (decode, T = 1 .. plan.GRID_MAX_T: grid i-quants and ternary types from the stored blocks)
vs its numpy twin and gguf.

One test per type compiles that type's kernel once and runs every shape through it. The AVX2-only and
portable paths (MODELC_NO_AVX512 / MODELC_NO_VNNI / MODELC_NO_AVX2) run in test_iquant.test_fallback_paths,
whose T=1 matmuls take these kernels.
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from modelc.ir import DataType
from modelc.kernels.matmul import gemm_fused_grid, gemm_fused_iq, linear, plan
from modelc.kernels.matmul.gemm_random import random_tensor
from modelc.kernels.quant import quant
from modelc.kernels.reference import ref_linear

TYPES = ["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M", "TQ1_0", "TQ2_0"]
SHAPES = [(37, 768, 1), (5, 256, 4), (16, 512, 3), (1, 1024, 1), (19, 512, 6)]
"""(rows, cols, tokens): odd row counts, fewer rows than a task, one row; 1-4 super-blocks per row; token
counts of one, of a whole group of four and groups with a remainder (6 = 4 + 2, past GRID_MAX_T but the
kernel takes any T)."""


def _act(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    t, c = x.shape
    xq = np.empty((t, c), np.int8)
    xd = np.empty((t, c // 32), np.float32)
    xs = np.empty((t, c // 16), np.float32)
    quant.quantize_act(xq, xd, xs, x)
    return xq, xd, xs


def test_kinds_and_plan() -> None:
    assert gemm_fused_grid.KINDS == {quant.KIND[DataType[n]] for n in TYPES}
    assert gemm_fused_grid.KINDS <= gemm_fused_iq.KINDS
    for name in TYPES:
        w = linear.prepare_weight(random_tensor(DataType[name], 1, 256, np.random.default_rng(0)))
        assert plan.plan_matmul(w, 1) is plan.Path.MATVEC_IQ
        assert plan.plan_matmul(w, plan.GRID_MAX_T) is plan.Path.MATVEC_IQ
        assert plan.plan_matmul(w, plan.GRID_MAX_T + 1) is plan.Path.ROWS
        assert plan.warm_tokens(w)[plan.Path.ROWS] == plan.GRID_MAX_T + 1


@pytest.mark.parametrize("name", TYPES)
def test_kernel_matches_twin_and_gguf(name: str) -> None:
    rng = np.random.default_rng(21)
    dt = DataType[name]
    for rows, cols, tokens in SHAPES:
        t = random_tensor(dt, rows, cols, rng)
        w = linear.prepare_weight(t)
        x = rng.standard_normal((tokens, cols)).astype(np.float32)
        xq, xd, xs = _act(x)
        out = np.full((tokens, rows), np.nan, np.float32)
        gemm_fused_grid.qmatvec_grid(out, xq, xd, xs, w.blocks, quant.KIND[dt])
        twin = np.empty_like(out)
        ref_linear.matmul_qact(twin, x, w)
        scale = np.abs(twin).max()
        np.testing.assert_allclose(out, twin, rtol=1e-4, atol=1e-4 * scale, err_msg=f"{name} {rows}x{cols}")
        # against llama.cpp's own dequantizer (gguf-py) on fp32 activations: only the int8 activation error
        deq = gguf.quants.dequantize(t.data.reshape(rows, -1), gguf.GGMLQuantizationType[name])
        bound = 5e-3 * (np.abs(x) @ np.abs(deq).T)  # int8 activations: <= 1/254 of each block's max, per element
        np.testing.assert_array_less(np.abs(out - x @ deq.T), bound, err_msg=f"{name} vs gguf")
        if tokens <= plan.GRID_MAX_T:  # linear.matmul runs this kernel (plan: MATVEC_IQ)
            via = np.full((tokens, rows), np.nan, np.float32)
            linear.matmul(via, x, w)
            np.testing.assert_array_equal(via, out)


def test_extreme_codes() -> None:
    """Every sign bit set, the largest grid indices and activations at +-127: the dots stay exact (no saturation)."""
    rng = np.random.default_rng(22)
    for name in ("IQ2_S", "IQ3_S"):
        dt = DataType[name]
        t = random_tensor(dt, 3, 512, rng)
        blocks = t.data.reshape(-1, dt.type_size)
        blocks[:, 2:] = 0xFF  # grid index bits, high bits, sign bytes, scales all ones
        x = np.where(rng.random((2, 512)) < 0.5, -1.0, 1.0).astype(np.float32)
        w = linear.prepare_weight(t)
        out = np.empty((2, 3), np.float32)
        gemm_fused_grid.qmatvec_grid(out, *_act(x), w.blocks, quant.KIND[dt])
        twin = np.empty_like(out)
        ref_linear.matmul_qact(twin, x, w)
        np.testing.assert_allclose(out, twin, rtol=1e-5, err_msg=name)
