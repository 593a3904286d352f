from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as G
from gguf.quants import dequantize, quantize

from modelc.artifact.prune import prune_tensor
from modelc.artifact.quantize import (
    _q4_k,
    _q6_k,
    _seq_sum,
    effective_kind,
    f32_to_bf16,
    quantize_tensor,
    should_quantize,
)
from modelc.errors import FormatError, InvalidRequestError, UnsupportedError
from modelc.ir import DataType, TensorData

from .kquant_literal import q4_k_block, q6_k_block


def _weights(rows=48, cols=512, seed=0):
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((rows, cols)) * rng.random((rows, 1)) * 3).astype(np.float32)
    a[1, :32] = 0  # an all-zero block
    a[2, 32:64] = 0.75  # a constant block
    a[3] = np.abs(a[3])  # an all-positive row
    return a


@pytest.mark.parametrize(
    ("kind", "qtype"), [("q8_0", G.Q8_0), ("q4_0", G.Q4_0), ("q4_1", G.Q4_1), ("q5_0", G.Q5_0), ("q5_1", G.Q5_1)]
)
@pytest.mark.parametrize("seed", [0, 1])
def test_bit_identical_to_gguf_quants(kind, qtype, seed):
    a = _weights(seed=seed)
    out = quantize_tensor("w", TensorData.from_array(a), kind)["w"]
    assert out.dtype is DataType[kind.upper()] and out.shape == a.shape
    np.testing.assert_array_equal(out.blocks(), quantize(a, qtype))


def test_bf16_bit_identical_to_gguf_quants():
    a = _weights()
    a[0, 0], a[0, 1] = np.nan, np.inf
    out = quantize_tensor("w", TensorData.from_array(a), "bf16")["w"]
    np.testing.assert_array_equal(out.data, quantize(a, G.BF16).reshape(-1).view(np.uint8))
    np.testing.assert_array_equal(f32_to_bf16(a[1:2]).view(np.uint8).reshape(-1), quantize(a[1:2], G.BF16).reshape(-1))


def _edge_blocks():
    rng = np.random.default_rng(5)
    blocks = [rng.standard_normal(256).astype(np.float32) * s for s in (1, 0.01, 100)]
    blocks += [
        np.abs(rng.standard_normal(256)).astype(np.float32),
        -np.abs(rng.standard_normal(256)).astype(np.float32),
    ]
    spike = np.zeros(256, np.float32)
    spike[40] = 1
    blocks += [spike, np.zeros(256, np.float32), np.full(256, 0.5, np.float32)]
    return np.stack(blocks)


def test_k_quants_equal_a_literal_port_of_llama_cpp():
    b = _edge_blocks()
    v4, v6 = _q4_k(b), _q6_k(b)
    for i in range(len(b)):
        assert bytes(v4[i]) == q4_k_block(b[i]), f"q4_k block {i}"
        assert bytes(v6[i]) == q6_k_block(b[i]), f"q6_k block {i}"


@pytest.mark.parametrize(("kind", "qtype", "tol"), [("q4_k", G.Q4_K, 0.09), ("q6_k", G.Q6_K, 0.025)])
def test_k_quants_dequantize_close(kind, qtype, tol):
    a = _weights()
    out = quantize_tensor("w", TensorData.from_array(a), kind)["w"]
    assert out.dtype is DataType[kind.upper()] and out.nbytes == out.dtype.nbytes(a.shape)
    back = dequantize(out.blocks(), qtype).reshape(a.shape)
    assert np.abs(back - a).mean() / np.abs(a).mean() < tol
    np.testing.assert_array_equal(back[1, :32], 0)


def test_f16_and_inputs_of_every_float_type():
    a = _weights(rows=4, cols=64)
    f16 = quantize_tensor("w", TensorData.from_array(a), "fp16")["w"]
    assert f16.dtype is DataType.F16
    np.testing.assert_array_equal(f16.array(), a.astype(np.float16))
    bf = TensorData(a.shape, DataType.BF16, f32_to_bf16(a).reshape(-1).view(np.uint8))
    from_bf = quantize_tensor("w", bf, "q8_0")["w"]
    as_f32 = (f32_to_bf16(a).astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(from_bf.blocks(), quantize(as_f32, G.Q8_0))
    from_f16 = quantize_tensor("w", TensorData.from_array(a.astype(np.float16)), "q4_0")["w"]
    np.testing.assert_array_equal(from_f16.blocks(), quantize(a.astype(np.float16).astype(np.float32), G.Q4_0))


def test_int8_per_row():
    a = _weights(rows=6, cols=40)
    out = quantize_tensor("w", TensorData.from_array(a), "int8")
    q, s = out["w"], out["w@scale"]
    assert q.dtype is DataType.I8 and s.dtype is DataType.F32 and s.shape == (6,)
    np.testing.assert_allclose(s.array(), np.abs(a).max(axis=1) / 127, rtol=1e-6)
    back = q.array().astype(np.float32) * s.array()[:, None]
    assert np.all(np.abs(back - a) <= s.array()[:, None] / 2 + 1e-6)
    assert q.array().min() >= -127


def test_int4_packing_low_nibble_first_and_odd_rows():
    a = np.array([[7.0, -7.0, 1.0, -1.0, 0.0, 3.0], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]], np.float32)
    out = quantize_tensor("w", TensorData.from_array(a), "int4")
    q, s = out["w"], out["w@scale"]
    assert q.dtype is DataType.I4 and q.nbytes == 2 * 3
    np.testing.assert_allclose(s.array(), [1.0, 0.0])
    rows = q.data.reshape(2, 3)
    assert rows[0].tolist() == [(7 & 0xF) | ((-7 & 0xF) << 4), (1 & 0xF) | ((-1 & 0xF) << 4), 3 << 4]
    assert rows[1].tolist() == [0, 0, 0]
    rng = np.random.default_rng(2)
    b = rng.standard_normal((5, 34)).astype(np.float32)
    out = quantize_tensor("w", TensorData.from_array(b), "int4")
    packed, scale = out["w"].data.reshape(5, 17), out["w@scale"].array()
    nib = np.stack([packed & 0xF, packed >> 4], axis=2).reshape(5, -1).astype(np.int32)
    vals = np.where(nib >= 8, nib - 16, nib)
    assert vals.min() >= -7 and vals.max() <= 7
    assert np.all(np.abs(vals * scale[:, None] - b) <= scale[:, None] / 2 + 1e-6)
    odd = quantize_tensor("w", TensorData.from_array(b[:, :33]), "int4")
    assert odd["w"].dtype is DataType.I8 and odd["w@scale"].shape == (5,)


def test_fallbacks_and_passthrough():
    assert effective_kind("q4_k", 256) == "q4_k"
    assert effective_kind("q4_k", 96) == "q8_0"
    assert effective_kind("q6_k", 100) == "f16"
    assert effective_kind("q4_0", 48) == "f16"
    assert effective_kind("int4", 8) == "int4" and effective_kind("int4", 7) == "int8"
    a = np.ones((3, 96), np.float32)
    assert quantize_tensor("w", TensorData.from_array(a), "q4_k")["w"].dtype is DataType.Q8_0
    q8 = TensorData((2, 32), DataType.Q8_0, np.zeros(68, np.uint8))
    assert quantize_tensor("w", q8, "q4_0") == {"w": q8}
    with pytest.raises(UnsupportedError, match="unknown quantization"):
        quantize_tensor("w", TensorData.from_array(a), "q3_xs")
    bad = a.copy()
    bad[0, 0] = np.nan
    with pytest.raises(FormatError, match="NaN"):
        quantize_tensor("w", TensorData.from_array(bad), "q8_0")
    with pytest.raises(UnsupportedError):
        quantize_tensor("ids", TensorData.from_array(np.ones((2, 32), np.int32)), "q8_0")


def test_should_quantize():
    m = TensorData.from_array(np.ones((4, 64), np.float32))
    v = TensorData.from_array(np.ones(64, np.float32))
    assert should_quantize("model.layers.0.mlp.up_proj.weight", m)
    assert should_quantize("blk.0.attn_q.weight", m, "q4_k")
    assert not should_quantize("model.layers.0.input_layernorm.weight", m)
    assert not should_quantize("blk.0.attn_norm.weight", v)
    assert not should_quantize("model.layers.0.self_attn.q_proj.bias", v)
    assert not should_quantize("model.embed_tokens.weight", m)
    assert not should_quantize("position_embd.weight", m) and not should_quantize(
        "bert.embeddings.position_embeddings.weight", m
    )
    assert should_quantize("model.embed_tokens.weight", m, quantize_embeddings=True)
    assert not should_quantize("lm_head.weight", m)
    assert should_quantize("output.weight", m, quantize_output=True)
    q8 = TensorData((2, 32), DataType.Q8_0, np.zeros(68, np.uint8))
    assert not should_quantize("blk.0.ffn_up.weight", q8)
    f16 = TensorData.from_array(np.ones((4, 64), np.float16))
    assert not should_quantize("blk.0.ffn_up.weight", f16, "fp16")


def test_chunked_rows_match_one_shot(monkeypatch):
    import modelc.artifact.quantize as qmod

    a = _weights(rows=37, cols=256)
    whole = quantize_tensor("w", TensorData.from_array(a), "q4_k")["w"].data.copy()
    monkeypatch.setattr(qmod, "CHUNK_ELEMENTS", 700)  # 2 rows per chunk
    np.testing.assert_array_equal(quantize_tensor("w", TensorData.from_array(a), "q4_k")["w"].data, whole)


def test_prune():
    a = np.array([[0.5, -0.01, 0.02, 0.0], [-0.3, 0.009, 1.0, -0.05]], np.float32)
    t, n = prune_tensor(TensorData.from_array(a), 0.03)
    want = np.array([[0.5, 0.0, 0.0, 0.0], [-0.3, 0.0, 1.0, -0.05]], np.float32)
    assert n == 3
    np.testing.assert_array_equal(t.array(), want)
    assert a[0, 1] == np.float32(-0.01)  # the input is untouched
    h, n16 = prune_tensor(TensorData.from_array(a.astype(np.float16)), 0.03)
    assert n16 == 3 and h.dtype is DataType.F16 and np.count_nonzero(h.array()) == 4
    bf = TensorData(a.shape, DataType.BF16, f32_to_bf16(a).reshape(-1).view(np.uint8))
    pb, nb = prune_tensor(bf, 0.03)
    assert nb == 3 and np.count_nonzero(pb.array()) == 4
    orig = TensorData.from_array(a)
    same, n0 = prune_tensor(orig, 0.0)
    assert n0 == 0 and same is orig
    vec = TensorData.from_array(np.array([0.001, 1.0], np.float32))
    assert prune_tensor(vec, 0.5) == (vec, 0)
    q8 = TensorData((2, 32), DataType.Q8_0, np.zeros(68, np.uint8))
    assert prune_tensor(q8, 0.5) == (q8, 0)
    with pytest.raises(InvalidRequestError):
        prune_tensor(vec, -1.0)


@pytest.mark.parametrize(("kind", "qtype"), [("q4_k", G.Q4_K), ("q6_k", G.Q6_K)])
def test_k_quants_match_gguf_quants_when_it_has_them(kind, qtype):
    a = _weights(rows=8, cols=256)
    try:
        want = gguf.quants.quantize(a, qtype)
    except NotImplementedError:
        pytest.skip(
            f"gguf {getattr(gguf, '__version__', '')} has no {kind} quantizer (compared to a literal port above)"
        )
    np.testing.assert_array_equal(quantize_tensor("w", TensorData.from_array(a), kind)["w"].blocks(), want)


@pytest.mark.parametrize(("n", "g"), [(16, 7), (32, 1000), (32, 70001)])
def test_seq_sum_is_row_by_row(n, g):
    rng = np.random.default_rng(n + g)
    a = (rng.standard_normal((n, g)) * 10 ** rng.uniform(-3, 3, (n, g))).astype(np.float32)
    acc = np.zeros(g, np.float32)
    for row in a:
        acc = acc + row
    np.testing.assert_array_equal(_seq_sum(a), acc)
