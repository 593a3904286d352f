"""Dequantizers: the numpy reference against gguf's, and the numba ones against the reference."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from modelc.errors import ModelcError
from modelc.ir import DataType, TensorData
from modelc.kernels.matmul import linear
from modelc.kernels.matmul.gemm_random import random_scale, random_tensor
from modelc.kernels.reference import ref_linear

GGUF_TYPES = ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
ALL_TYPES = [*GGUF_TYPES, "F32", "Q8_K"]


@pytest.mark.parametrize("name", GGUF_TYPES)
def test_reference_matches_gguf_on_random_bytes(name: str) -> None:
    dt = DataType[name]
    rng = np.random.default_rng(1)
    rows, cols = 7, 512
    t = random_tensor(dt, rows, cols, rng)
    want = gguf.quants.dequantize(t.data.reshape(rows, -1), gguf.GGMLQuantizationType[name])
    got = ref_linear.dequantize(t)
    assert got.shape == (rows, cols) and got.dtype == np.float32
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "BF16"])
def test_reference_round_trips_gguf_quantize(name: str) -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 256)).astype(np.float32)
    q = gguf.quants.quantize(x, gguf.GGMLQuantizationType[name])
    t = TensorData((3, 256), DataType[name], q.reshape(-1))
    got = ref_linear.dequantize(t)
    np.testing.assert_array_equal(got, gguf.quants.dequantize(q, gguf.GGMLQuantizationType[name]))
    assert np.abs(got - x).max() < 0.5


def test_q8_k_reference() -> None:
    rng = np.random.default_rng(3)
    t = random_tensor(DataType.Q8_K, 2, 512, rng)
    blocks = t.data.reshape(4, 292)
    d = blocks[:, 0:4].copy().view("<f4")
    q = blocks[:, 4:260].copy().view(np.int8).astype(np.float32)
    np.testing.assert_array_equal(ref_linear.dequantize(t), (d * q).reshape(2, 512))


def test_int8_and_int4_with_scales() -> None:
    rng = np.random.default_rng(4)
    q8 = rng.integers(-128, 128, (3, 5), dtype=np.int8)
    s = np.array([0.5, 2.0, -1.0], np.float32)
    t8 = TensorData.from_array(q8)
    st = TensorData.from_array(s)
    np.testing.assert_array_equal(ref_linear.dequantize(t8, st), q8 * s[:, None])
    vals = rng.integers(-8, 8, (3, 6))
    nib = vals & 0x0F
    packed = (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8)  # low nibble first
    t4 = TensorData((3, 6), DataType.I4, packed.reshape(-1))
    np.testing.assert_array_equal(ref_linear.dequantize(t4, st), vals * s[:, None])
    with pytest.raises(ModelcError, match="scale"):
        ref_linear.dequantize(t4)


@pytest.mark.parametrize("name", ALL_TYPES)
def test_dequantize_rows_is_a_row_subset(name: str) -> None:
    dt = DataType[name]
    rng = np.random.default_rng(5)
    t = random_tensor(dt, 11, 256, rng)
    ids = np.array([10, 0, 3, 3], np.int64)
    full = ref_linear.dequantize(t)
    np.testing.assert_array_equal(ref_linear.dequantize_rows(t, ids), full[ids])
    np.testing.assert_array_equal(linear.dequantize_rows(t, ids), full[ids])
    np.testing.assert_array_equal(linear.dequantize(t), full)
    for one in (np.array([7], np.int32), [0], np.array([[10]])):  # a decode step's lookup: one id, any int type
        np.testing.assert_array_equal(linear.dequantize_rows(t, one), full[np.asarray(one).reshape(-1)])


@pytest.mark.parametrize("name", ["I8", "I4"])
def test_dequantize_rows_scaled(name: str) -> None:
    rng = np.random.default_rng(6)
    t = random_tensor(DataType[name], 9, 66, rng)
    s = random_scale(9, rng)
    ids = np.array([8, 1], np.int64)
    full = ref_linear.dequantize(t, s)
    np.testing.assert_array_equal(linear.dequantize_rows(t, ids, s), full[ids])
    np.testing.assert_array_equal(linear.dequantize(t, s), full)


def test_quantize_act_round_trip() -> None:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 96)).astype(np.float32)
    x[1, 32:64] = 0.0
    q, d = ref_linear.quantize_act(x)
    assert q.dtype == np.int8 and d.shape == (3, 3)
    assert np.abs(q).max() == 127
    back = (q.reshape(3, 3, 32) * d[:, :, None]).reshape(3, 96)
    np.testing.assert_allclose(back, x, atol=float(d.max()) / 2 + 1e-7)
    assert not back[1, 32:64].any()


def test_quantize_act_kernel_matches_reference() -> None:
    from modelc.kernels.quant import quant

    rng = np.random.default_rng(8)
    x = rng.standard_normal((5, 256)).astype(np.float32)
    x[0, :32] = 0.0  # an all-zero block
    x[1, :32] = np.arange(32, dtype=np.float32) - 15.5  # amax 16.5 ...
    x[2, :32] = 0.5 * np.arange(-16, 16, dtype=np.float32)  # ... and exact .5 ties after scaling
    x[2, 0] = -127.0
    x[2, 1] = 63.5
    x[2, 2] = -63.5
    xq = np.full((5, 256), 99, np.int8)
    xd = np.full((5, 8), np.nan, np.float32)
    xs = np.full((5, 16), np.nan, np.float32)
    quant.quantize_act(xq, xd, xs, x)
    q, d = ref_linear.quantize_act(x)
    np.testing.assert_array_equal(xq, q)
    np.testing.assert_array_equal(xd, d)
    assert xq[2, 1] == 64 and xq[2, 2] == -64
    sums = q.reshape(5, 16, 16).astype(np.float32).sum(axis=2) * np.repeat(d, 2, axis=1)
    np.testing.assert_allclose(xs, sums, rtol=1e-6)
    for t in (1, 5, 37):  # fewer rows than its chunks, and more; the same bits as the one-thread kernel
        xt = np.concatenate([x] * 8)[:t] if t > 5 else x[:t]
        got = quant.quantized_rows(np.ascontiguousarray(xt))
        for g, w in zip(got, quant.quantized(np.ascontiguousarray(xt)), strict=True):
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize(
    "rel", ["tiny-llama256/gguf/tiny-llama256-Q4_K_M.gguf", "tiny-llama/gguf/tiny-llama-Q4_0.gguf"]
)
def test_real_llamacpp_quantized_tensors(shared_fixtures, rel: str) -> None:
    """Tensors quantized by llama.cpp itself: our dequantizers and matmul agree with gguf-py."""
    path = shared_fixtures / "models" / rel
    if not path.exists():
        pytest.skip(f"{rel} is not in the fixtures")
    reader = gguf.GGUFReader(path)
    seen = set()
    for t in reader.tensors:
        dt = DataType.from_ggml(int(t.tensor_type))
        if len(t.shape) != 2 or dt in seen or dt is DataType.F32:
            continue
        seen.add(dt)
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        td = TensorData(shape, dt, np.asarray(t.data).reshape(-1).view(np.uint8))
        want = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(shape)
        np.testing.assert_array_equal(linear.dequantize(td), want)
        w = linear.prepare_weight(td)
        x = np.random.default_rng(0).standard_normal((2, shape[1])).astype(np.float32)
        out = np.full((2, shape[0]), np.nan, np.float32)
        linear.matmul(out, x, w)
        ref = np.empty_like(out)
        if dt.is_quantized:
            ref_linear.matmul_qact(ref, x, w)
        else:
            ref_linear.matmul(ref, x, w)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
    assert seen
