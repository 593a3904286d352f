"""llama.cpp's Q1_0 and Q2_0 (ggml types 41, 42): gguf 0.19 does not know them, so the numpy twins are checked
against llama.cpp's dequantize_row_q1_0 / _q2_0 written out by hand here, the numba kernels against the twins,
and whole models against llama.cpp's own logits in tests/models/test_quant_vs_llamacpp.py."""

from __future__ import annotations

import numpy as np
import pytest

from modelc.ir import DataType
from modelc.kernels.matmul import linear, plan
from modelc.kernels.matmul.gemm_random import random_tensor
from modelc.kernels.reference import ref_linear


@pytest.mark.parametrize(("name", "ggml", "block", "size"), [("Q1_0", 41, 128, 18), ("Q2_0", 42, 64, 18)])
def test_layout(name, ggml, block, size):
    dt = DataType[name]
    assert (dt.ggml_type, dt.block_size, dt.type_size) == (ggml, block, size)
    assert DataType.from_ggml(ggml) is dt


def _llamacpp_dequant(name: str, raw: np.ndarray) -> np.ndarray:
    """A literal port of ggml-quants.c's loops, one block at a time."""
    out = []
    for blk in raw:
        d = np.float32(blk[:2].view("<f2")[0])
        if name == "Q1_0":
            out += [d if (blk[2 + j // 8] >> (j % 8)) & 1 else -d for j in range(128)]
        else:
            out += [np.float32((int(blk[2 + j // 4] >> (2 * (j % 4))) & 3) - 1) * d for j in range(64)]
    return np.asarray(out, np.float32)


@pytest.mark.parametrize("name", ["Q1_0", "Q2_0"])
def test_reference_and_kernels(name):
    rng = np.random.default_rng(21)
    t = random_tensor(DataType[name], 9, 512, rng)
    want = _llamacpp_dequant(name, t.data.reshape(-1, 18)).reshape(9, 512)
    np.testing.assert_array_equal(ref_linear.dequantize(t), want)
    np.testing.assert_array_equal(linear.dequantize(t), want)
    ids = np.array([8, 0, 3], np.int64)
    np.testing.assert_array_equal(linear.dequantize_rows(t, ids), want[ids])
    w = linear.prepare_weight(t)
    for tokens in (1, 3, 6):
        x = rng.standard_normal((tokens, 512)).astype(np.float32)
        out = np.empty((tokens, 9), np.float32)
        linear.matmul(out, x, w)
        ref = np.empty_like(out)
        ref_linear.matmul_qact(ref, x, w)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    x = rng.standard_normal((plan.PREFILL_MIN_T + 3, 512)).astype(np.float32)
    out = np.empty((x.shape[0], 9), np.float32)
    linear.matmul(out, x, w)
    np.testing.assert_allclose(out, x @ want.T, rtol=1e-4, atol=1e-5 * np.abs(x @ want.T).max())
