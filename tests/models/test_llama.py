from __future__ import annotations

import numpy as np
import pytest

from modelc.cache.kv_pages import KVPages
from modelc.engine.runner import Runner
from modelc.errors import FormatError, UnsupportedError
from modelc.ir import Model, TensorData
from modelc.kernels.select import kernel_set
from modelc.models.batch import make_batch
from modelc.models.registry import build_model
from modelc.models.tiny import make_tiny_gpt2, make_tiny_llama, reference_hidden, reference_logits


def _kv(model, blocks=32, dtype="float32"):
    L, K, D = model.kv_shape()
    return KVPages(L, blocks, K, D, dtype)


def _tables(lens, start=0):
    out, nxt = [], start
    for n in lens:
        nb = (n + 15) // 16
        out.append(np.arange(nxt, nxt + nb, dtype=np.int32))
        nxt += nb
    return out


def _prefill(model, kv, ids, table, start=0, logit_rows=None):
    return model.forward(make_batch([(ids[start:], start, table)], logit_rows=logit_rows), kv)


def _partial_rotary():
    m = make_tiny_llama(9)
    m.config["partial_rotary_factor"] = 0.5  # rotate 8 of 16 head dims
    return m


MODELS = {
    "llama": lambda: make_tiny_llama(0),
    "llama-mha-tied": lambda: make_tiny_llama(1, num_kv_heads=4, tie=True),
    "qwen2-bias": lambda: make_tiny_llama(2, qkv_bias=True, architecture="qwen2"),
    "llama3-scaled": lambda: make_tiny_llama(3, num_heads=2, num_kv_heads=1, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64}),
    "gpt2": lambda: make_tiny_gpt2(0),
    "partial-rotary": lambda: _partial_rotary(),
}  # fmt: skip


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("ks", ["numba", "ref"])
def test_prefill_logits_match_dense_reference(name, ks):
    src = MODELS[name]()
    model = build_model(src, kernel_set(ks))
    ids = np.random.default_rng(5).integers(0, 96, 37).astype(np.int32)
    got = _prefill(model, _kv(model), ids, _tables([37])[0])
    want = reference_logits(src, ids)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_hidden_output_matches_reference(name):
    src = MODELS[name]()
    model = build_model(src)
    ids = np.arange(1, 20, dtype=np.int32)
    hid = model.forward(make_batch([(ids, 0, _tables([19])[0])]), _kv(model), output="hidden")
    np.testing.assert_allclose(hid, reference_hidden(src, ids), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["llama", "gpt2"])
@pytest.mark.parametrize("kv_dtype", ["float32", "float16"])
def test_batch_of_four_equals_each_alone(name, kv_dtype):
    src = MODELS[name]()
    model = build_model(src)
    rng = np.random.default_rng(9)
    lens = [1, 17, 5, 40]
    seqs = [rng.integers(0, 96, n).astype(np.int32) for n in lens]
    tables = _tables(lens, start=2)
    alone = []
    for ids, bt in zip(seqs, tables, strict=True):
        alone.append(_prefill(model, _kv(model, dtype=kv_dtype), ids, bt)[-1])
    last_rows = np.cumsum(lens) - 1
    batch = make_batch(list(zip(seqs, [0] * 4, tables, strict=True)), logit_rows=last_rows)
    together = model.forward(batch, _kv(model, dtype=kv_dtype))
    # fp16 pages round K/V (~5e-4 relative) where one side reads them back and the other may not (the paths
    # differ by T and CPU): AVX2-only Zen 3 read 1.3e-5 on llama's 17-token row, against 6e-7 with fp32 pages
    atol = 1e-5 if kv_dtype == "float32" else 1e-4
    np.testing.assert_allclose(together, np.stack(alone), rtol=1e-5, atol=atol)


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_chunked_prefill_and_decode_equal_one_pass(name):
    src = MODELS[name]()
    model = build_model(src)
    ids = np.random.default_rng(3).integers(0, 96, 45).astype(np.int32)
    bt = _tables([45], start=1)[0]
    full = _prefill(model, _kv(model), ids, bt)  # (45, V)
    kv = _kv(model)
    parts = []
    for a, b in ((0, 16), (16, 23), (23, 44)):
        parts.append(model.forward(make_batch([(ids[a:b], a, bt)]), kv))
    parts.append(model.forward(make_batch([(ids[44:45], 44, bt)]), kv))  # a decode step
    np.testing.assert_allclose(np.concatenate(parts), full, rtol=1e-5, atol=1e-5)


def test_fp16_kv_close_to_fp32():
    src = make_tiny_llama(0)
    model = build_model(src)
    ids = np.arange(3, 40, dtype=np.int32)
    bt = _tables([37])[0]
    a = _prefill(model, _kv(model), ids, bt)
    b = _prefill(model, _kv(model, dtype="float16"), ids, bt)
    np.testing.assert_allclose(b, a, rtol=0, atol=5e-3 * np.abs(a).max())


def test_logit_rows_select():
    src = make_tiny_llama(0)
    model = build_model(src)
    ids = np.arange(10, dtype=np.int32)
    full = _prefill(model, _kv(model), ids, _tables([10])[0])
    some = _prefill(model, _kv(model), ids, _tables([10])[0], logit_rows=np.array([9, 2]))
    # 2 rows and 10 rows may take different matmul kernels (small-batch vs BLAS): same rows, other
    # summation order, so equal to fp32 rounding; a wrong row would be off by O(1).
    np.testing.assert_allclose(some, full[[9, 2]], rtol=1e-5, atol=1e-6)


def test_bad_models_raise_clear_errors():
    src = make_tiny_llama(0)
    del src.tensors["model.layers.1.mlp.down_proj.weight"]
    with pytest.raises(FormatError, match="down_proj"):
        build_model(src)
    src = make_tiny_llama(0)
    src.architecture = "mamba"
    with pytest.raises(UnsupportedError, match="mamba"):
        build_model(src)
    src = make_tiny_llama(0)
    del src.config["hidden_size"]
    with pytest.raises(FormatError, match="hidden_size"):
        build_model(src)


def test_phi3_fused_qkv_and_gate_up_split_at_load():
    src = make_tiny_llama(7)
    fused = make_tiny_llama(7, architecture="phi3")
    t = fused.tensors
    for i in range(2):
        p = f"model.layers.{i}."
        parts = [t.pop(p + f"self_attn.{n}_proj.weight").array() for n in ("q", "k", "v")]
        t[p + "self_attn.qkv_proj.weight"] = TensorData.from_array(np.concatenate(parts))
        gu = [t.pop(p + f"mlp.{n}_proj.weight").array() for n in ("gate", "up")]
        t[p + "mlp.gate_up_proj.weight"] = TensorData.from_array(np.concatenate(gu))
    ids = np.arange(2, 30, dtype=np.int32)
    got = _prefill(build_model(fused), _kv(build_model(fused)), ids, _tables([28])[0])
    np.testing.assert_allclose(got, reference_logits(src, ids), rtol=1e-4, atol=1e-4)


def test_gguf_naming_with_interleaved_rope():
    """GGUF llama: Q/K rows permuted for interleaved rope (as convert_hf_to_gguf does), rope_neox=False."""
    src = make_tiny_llama(8)
    H, K, D = 4, 2, 16

    def permute(w, n_head):  # llama.cpp's convert_hf_to_gguf LlamaModel.permute
        return w.reshape(n_head, 2, D // 2, -1).swapaxes(1, 2).reshape(w.shape)

    g = {"token_embd.weight": src.tensors["model.embed_tokens.weight"], "output_norm.weight": src.tensors["model.norm.weight"],
         "output.weight": src.tensors["lm_head.weight"]}  # fmt: skip
    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
             "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}  # fmt: skip
    for i in range(2):
        for hf, gg in names.items():
            w = src.tensors[f"model.layers.{i}.{hf}.weight"]
            if gg in ("attn_q", "attn_k"):
                w = TensorData.from_array(np.ascontiguousarray(permute(w.array(), H if gg == "attn_q" else K)))
            g[f"blk.{i}.{gg}.weight"] = w
    cfg = dict(src.config, rope_neox=False)
    gguf_model = Model("g", "llama", g, cfg, naming="gguf")
    model = build_model(gguf_model)
    ids = np.arange(1, 40, dtype=np.int32)
    got = _prefill(model, _kv(model), ids, _tables([39])[0])
    np.testing.assert_allclose(got, reference_logits(src, ids), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["llama", "gpt2"])
@pytest.mark.parametrize("kv_dtype", ["float32", "float16"])
def test_long_prefill_through_sgemm_attention_matches_reference(name, kv_dtype):
    """>= 64 rows of one sequence take the sgemm attention path; a decode batch beside it the numba one."""
    src = MODELS[name]()
    model = build_model(src)
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 96, 120).astype(np.int32)
    short = rng.integers(0, 96, 9).astype(np.int32)
    kv = _kv(model, dtype=kv_dtype)
    bt_long, bt_short = _tables([120, 9])
    model.forward(make_batch([(short[:8], 0, bt_short)]), kv)
    batch = make_batch([(ids, 0, bt_long), (short[8:], 8, bt_short)], logit_rows=np.array([119, 120]))
    got = model.forward(batch, kv)
    tol = 1e-4 if kv_dtype == "float32" else 5e-3
    want_long = reference_logits(src, ids)[-1]
    want_short = reference_logits(src, short)[-1]
    np.testing.assert_allclose(got[0], want_long, rtol=tol, atol=tol * np.abs(want_long).max())
    np.testing.assert_allclose(got[1], want_short, rtol=tol, atol=tol * np.abs(want_short).max())


@pytest.mark.parametrize("kind", ["int8", "int4", "q8_0"])
def test_quantized_hf_gpt2_conv1d_weights_load(kind):
    """HF GPT-2 Conv1D weights are stored (in, out) and transposed at load; int8/int4 carry an @scale
    per stored row that the transpose must apply (it was dropped: 'needs a per-row F32 scale tensor')."""
    from modelc.artifact.transforms import plan

    src = make_tiny_gpt2(0)
    dense = Runner(src, num_kv_blocks=4).logits([5, 17, 3, 88])
    src.tensors, stats = plan(src.tensors, prune=None, quantize=kind)
    assert stats.quantized
    got = Runner(src, num_kv_blocks=4).logits([5, 17, 3, 88])
    assert np.abs(got - dense).max() < 0.1 * np.abs(dense).max()
