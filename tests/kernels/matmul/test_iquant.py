"""i-quants, MXFP4 and ternary types: numpy twins vs gguf's dequantizer, numba kernels vs the twins."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from modelc.ir import DataType
from modelc.kernels.matmul import linear, plan
from modelc.kernels.matmul.gemm_random import random_tensor
from modelc.kernels.reference import ref_linear

IQ_TYPES = [
    "IQ4_NL",
    "IQ4_XS",
    "MXFP4",
    "TQ1_0",
    "TQ2_0",
    "IQ3_S",
    "IQ3_XXS",
    "IQ2_XXS",
    "IQ2_XS",
    "IQ2_S",
    "IQ1_S",
    "IQ1_M",
]
GGML_IDS = {"IQ2_XXS": 16, "IQ2_XS": 17, "IQ3_XXS": 18, "IQ1_S": 19, "IQ4_NL": 20, "IQ3_S": 21, "IQ2_S": 22,
            "IQ4_XS": 23, "IQ1_M": 29, "TQ1_0": 34, "TQ2_0": 35, "MXFP4": 39}  # fmt: skip


@pytest.mark.parametrize("name", IQ_TYPES)
def test_layout_matches_ggml(name: str) -> None:
    dt = DataType[name]
    q = gguf.GGMLQuantizationType[name]
    assert dt.ggml_type == GGML_IDS[name] == int(q)
    assert (dt.block_size, dt.type_size) == gguf.GGML_QUANT_SIZES[q]
    assert DataType.from_ggml(GGML_IDS[name]) is dt


@pytest.mark.parametrize("name", IQ_TYPES)
def test_reference_matches_gguf_on_random_blocks(name: str) -> None:
    rng = np.random.default_rng(11)
    rows, cols = 5, 512
    t = random_tensor(DataType[name], rows, cols, rng)
    want = gguf.quants.dequantize(t.data.reshape(rows, -1), gguf.GGMLQuantizationType[name])
    got = ref_linear.dequantize(t)
    assert got.dtype == np.float32 and np.isfinite(want).all() and np.abs(want).max() > 0
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", IQ_TYPES)
def test_kernel_dequantize_matches_reference(name: str) -> None:
    rng = np.random.default_rng(12)
    t = random_tensor(DataType[name], 9, 512, rng)
    full = ref_linear.dequantize(t)
    np.testing.assert_array_equal(linear.dequantize(t), full)
    ids = np.array([8, 0, 3, 3], np.int64)
    np.testing.assert_array_equal(linear.dequantize_rows(t, ids), full[ids])


@pytest.mark.parametrize("name", IQ_TYPES)
@pytest.mark.parametrize("tokens", [1, 3, 6])
def test_matmul_matches_quantized_activation_twin(name: str, tokens: int) -> None:
    rng = np.random.default_rng(13)
    w = linear.prepare_weight(random_tensor(DataType[name], 40, 512, rng))
    x = rng.standard_normal((tokens, 512)).astype(np.float32)
    out = np.empty((tokens, 40), np.float32)
    linear.matmul(out, x, w)
    want = np.empty_like(out)
    ref_linear.matmul_qact(want, x, w)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("name", ["IQ4_XS", "IQ2_XXS", "TQ1_0"])
def test_prefill_path_is_fp32(name: str) -> None:
    rng = np.random.default_rng(14)
    w = linear.prepare_weight(random_tensor(DataType[name], 24, 256, rng))
    x = rng.standard_normal((plan.PREFILL_MIN_T + 3, 256)).astype(np.float32)
    out = np.empty((x.shape[0], 24), np.float32)
    linear.matmul(out, x, w)
    want = x @ ref_linear.dequantize(w).T
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize(
    ("name", "rows", "cols"),
    [("IQ4_NL", 33, 96), ("IQ4_NL", 9, 320), ("MXFP4", 17, 160), ("MXFP4", 7, 2880), ("IQ4_XS", 35, 768)],
)
def test_t1_fused_kernel_odd_shapes(name: str, rows: int, cols: int) -> None:
    """The T=1 code-book kernel (two rows per pass) on odd row counts and rows that are not whole 256-blocks."""
    from modelc.kernels.matmul import gemm_fused_iq, gemm_fused_k
    from modelc.kernels.quant import quant

    rng = np.random.default_rng(15)
    w = linear.prepare_weight(random_tensor(DataType[name], rows, cols, rng))
    assert quant.KIND[w.dtype] in (gemm_fused_k.KINDS if name == "IQ4_XS" else gemm_fused_iq.KINDS)
    x = rng.standard_normal((1, cols)).astype(np.float32)
    out = np.empty((1, rows), np.float32)
    linear.matmul(out, x, w)
    want = np.empty_like(out)
    ref_linear.matmul_qact(want, x, w)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_mxfp4_subnormal_and_large_scales() -> None:
    """e8m0 bytes 0 and 1 are subnormal scales (2^-128, 2^-127): the vector and table decodings agree with gguf."""
    rng = np.random.default_rng(16)
    t = random_tensor(DataType.MXFP4, 6, 512, rng)
    blocks = t.data.reshape(-1, 17)
    blocks[:, 0] = np.resize(np.array([0, 1, 2, 3, 127, 140], np.uint8), blocks.shape[0])
    want = gguf.quants.dequantize(t.data.reshape(6, -1), gguf.GGMLQuantizationType.MXFP4)
    np.testing.assert_array_equal(ref_linear.dequantize(t), want)
    np.testing.assert_array_equal(linear.dequantize(t), want)
    w = linear.prepare_weight(t)
    x = rng.standard_normal((1, 512)).astype(np.float32)
    out = np.empty((1, 6), np.float32)
    linear.matmul(out, x, w)
    ref = np.empty_like(out)
    ref_linear.matmul_qact(ref, x, w)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


_FALLBACK_CHECK = """
import numpy as np
from modelc.ir import DataType
from modelc.kernels.matmul import linear
from modelc.kernels.reference import ref_linear
from modelc.kernels.simd import qdot
from modelc.kernels.matmul.gemm_random import random_tensor
rng = np.random.default_rng(0)
worst = 0.0
for name in NAMES:
    t = random_tensor(DataType[name], 9, 2560 if name in ("IQ4_NL", "MXFP4") else 512, rng)
    assert np.array_equal(linear.dequantize(t), ref_linear.dequantize(t)), name
    w = linear.prepare_weight(t)
    for tokens in (1, 3):
        x = rng.standard_normal((tokens, w.cols)).astype(np.float32)
        out = np.full((tokens, 9), np.nan, np.float32)
        linear.matmul(out, x, w)
        want = np.empty_like(out)
        ref_linear.matmul_qact(want, x, w)
        worst = max(worst, float(np.abs(out - want).max() / np.abs(want).max()))
print(qdot.HAS_AVX2, qdot.HAS_VNNI, worst)
"""


# What differs between instruction sets is in the shared dots, not in a type's block decoding: IQ4_NL,
# IQ4_XS and MXFP4 (qdot_iq's lookups), dot_i8x32 (IQ1_S / IQ1_M), dotu_i8x32 on sign-flipped grids
# (IQ2_*, IQ3_*) and on ternary codes (TQ1_0, TQ2_0; TQ2_0 through bits_i8x32), and the low-bit rows
# (Q1_0, Q2_0). Each switch runs each of those once (one lookup type, one IQ1 type, TQ2_0, a grid type or two,
# a low-bit row), and every type runs under at least one switch: all 14 types under each switch took 10
# CPU-minutes of CI, 26 type runs 5 (the slow step's three longest tests), these 18 less.
FALLBACK_TYPES = {
    "MODELC_NO_AVX512": ["IQ4_NL", "IQ1_S", "TQ2_0", "TQ1_0", "IQ3_S", "Q1_0"],
    "MODELC_NO_VNNI": ["IQ4_XS", "IQ1_M", "TQ2_0", "IQ3_XXS", "IQ2_XS", "Q2_0"],
    "MODELC_NO_AVX2": ["MXFP4", "IQ1_S", "TQ2_0", "IQ2_XXS", "IQ2_S", "Q2_0"],
}


def test_fallback_types_cover_every_type() -> None:
    every = {"IQ4_NL", "IQ4_XS", "MXFP4", "TQ1_0", "TQ2_0", "IQ3_S", "IQ3_XXS", "IQ2_XXS", "IQ2_XS", "IQ2_S",
             "IQ1_S", "IQ1_M", "Q1_0", "Q2_0"}  # fmt: skip
    assert set().union(*FALLBACK_TYPES.values()) == every
    for names in FALLBACK_TYPES.values():
        assert (
            {"IQ4_NL", "IQ4_XS", "MXFP4"} & set(names)
            and {"IQ1_S", "IQ1_M"} & set(names)
            and "TQ2_0" in names
            and {"IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_S", "IQ3_XXS"} & set(names)
            and {"Q1_0", "Q2_0"} & set(names)
        )


@pytest.mark.slow
@pytest.mark.timeout(900)  # a cold compile of every type under the switch (the grid types ~15 CPU-s each)
@pytest.mark.parametrize("switch", sorted(FALLBACK_TYPES))
def test_fallback_paths(switch: str) -> None:
    """The 256-bit VNNI, AVX2 and portable LLVM IR paths of the new types give the reference's numbers."""
    from tests.kernels.fallback import fallback_worst

    script = f"NAMES = {FALLBACK_TYPES[switch]!r}\n" + _FALLBACK_CHECK
    assert fallback_worst(script, {switch: "1"}, timeout=900) < 1e-4
