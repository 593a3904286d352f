"""HF-named models exported to GGUF (export_gguf_hf) and read back by modelc's GGUF reader.

The tiny LLaMA-family variants of tests/fixtures/models/variants (LLaMA 3 rope scaling, biases,
Mistral, Qwen2, Phi-3 fused weights) and a tiny GPT-2 are packed, exported, re-read: the logits
must equal the source's (max|a - b| / max|a| <= 1e-4, F32) and the GGUF-built tokenizer must
encode like the source tokenizer.json, for GPT-2, LLaMA 3 and Qwen2 style byte-level
pre-tokenizers. llama.cpp itself is checked outside CI: benchmarks/export_vs_llamacpp.py.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from modelc.api.engine import Engine
from modelc.artifact import open_artifact, write_artifact
from modelc.errors import UnsupportedError
from modelc.formats.detect import read_model
from modelc.formats.export_gguf import export_gguf
from modelc.formats.gguf import read_gguf
from modelc.formats.gguf_file import parse_gguf
from modelc.ir import Model, TensorData
from modelc.models.tiny import make_tiny_gpt2
from modelc.tokenizer import Tokenizer

VARIANTS = pathlib.Path(__file__).parents[1] / "fixtures" / "models" / "variants"
MAX_REL_ERR = 1e-4

# the regexes as the models' own tokenizer.json files spell them
LLAMA3_REGEX = (
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
)
QWEN2_REGEX = (
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
)

TEXTS = [
    "Hello world",
    "hello World!",
    " leading space",
    "trailing space ",
    "  two  spaces   three",
    "\ttab\tseparated",
    "line one\nline two\n\nline four",
    "\r\n windows line\r\n",
    "12345 678 9",
    "3.14159 and 2,718",
    "1000000000000",
    "I'm sure they'll say it's fine, we've",
    "DON'T SHOUT",
    "naïve café, déjà vu",
    "日本語のテキスト",
    "中文字符测试",
    "Ελληνικά και русский",
    "emoji 🙂🚀 and ✓",
    "def f(x):\n    return x * 2\n",
    "for (int i = 0; i < n; ++i) { a[i] += b[i]; }",
    "if __name__ == '__main__':\n\tmain()",
    '<html><body class="x">hi</body></html>',
    "https://example.com/path?q=1&r=2",
    "snake_case and camelCase and kebab-case",
    "$100 @user #tag %20 ^~`|\\",
    "The farmer packed bread and cheese for the hill.",
    "<|im_start|>user\nhi<|im_end|>",
    "<s> a BOS in the text </s>",
    "...!!!???",
    "a",
    "",
    " ",
    "\n",
    "ŉ ǅ ﬁ",  # letters whose case folding changes length
    "x" * 40,
]


def _hf(name: str) -> Model:
    return read_model(VARIANTS / name / "hf")


def with_pre_tokenizer(model: Model, style: str) -> Model:
    """The model with a LLaMA 3 ("llama3") or Qwen2 ("qwen2": NFC normalizer too) style tokenizer.json."""
    doc = json.loads(model.tokenizer_json)
    regex = {"llama3": LLAMA3_REGEX, "qwen2": QWEN2_REGEX}[style]
    doc["pre_tokenizer"] = {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": style == "llama3", "use_regex": False},
        ],
    }
    doc["model"]["ignore_merges"] = style == "llama3"
    if style == "qwen2":
        doc["normalizer"] = {"type": "NFC"}
    model.tokenizer_json = json.dumps(doc)
    return model


def tiny_gpt2() -> Model:
    """make_tiny_gpt2 with the variants' byte-level BPE tokenizer (320 tokens, <s> = 0)."""
    model = make_tiny_gpt2(3, vocab_size=320, max_positions=256)
    model.tokenizer_json = (VARIANTS / "qwen2" / "hf" / "tokenizer.json").read_text()
    return model


def _roundtrip(model: Model, tmp_path: pathlib.Path) -> tuple[Model, str]:
    art = open_artifact(write_artifact(model, tmp_path / "m.modelc"), verify=True)
    out = export_gguf(art, tmp_path / "m.gguf")
    return read_gguf(out), out


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def _check_tokenizer(src: Model, back: Model) -> None:
    a = Tokenizer.from_json(src.tokenizer_json, src.special_tokens)
    b = Tokenizer.from_json(back.tokenizer_json, back.special_tokens)
    for text in TEXTS:
        assert b.encode(text) == a.encode(text), text


CASES = {  # name -> (build the source, GGUF architecture, tokenizer.ggml.pre)
    "llama3": (lambda: _hf("llama3"), "llama", "gpt-2"),
    "llama-bias": (lambda: _hf("llama-bias"), "llama", "gpt-2"),
    "mistral": (lambda: _hf("mistral"), "llama", "gpt-2"),
    "mistral-swa8": (lambda: _hf("mistral-swa8"), "llama", "gpt-2"),
    "qwen2": (lambda: _hf("qwen2"), "qwen2", "gpt-2"),
    "qwen2-tied": (lambda: _hf("qwen2-tied"), "qwen2", "gpt-2"),
    "phi3": (lambda: _hf("phi3"), "phi3", "gpt-2"),
    "phi3-partial": (lambda: _hf("phi3-partial"), "phi3", "gpt-2"),
    "gpt2": (tiny_gpt2, "gpt2", "gpt-2"),
    "llama3-tokenizer": (lambda: with_pre_tokenizer(_hf("llama3"), "llama3"), "llama", "llama-bpe"),
    "qwen2-tokenizer": (lambda: with_pre_tokenizer(_hf("qwen2"), "qwen2"), "qwen2", "qwen2"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_export_matches_source(tmp_path, case):
    build, arch, pre = CASES[case]
    src = build()
    back, path = _roundtrip(src, tmp_path)
    fields = parse_gguf(path).fields
    assert fields["general.architecture"] == arch and back.naming == "gguf"
    assert fields["tokenizer.ggml.model"] == "gpt2" and fields["tokenizer.ggml.pre"] == pre
    assert len(fields["tokenizer.ggml.tokens"]) == src.config["vocab_size"]
    assert not any(n.startswith(("model.", "transformer.", "lm_head")) for n in back.tensors)
    ids = Tokenizer.from_json(src.tokenizer_json, src.special_tokens).encode(" ".join(TEXTS[:12]))[:48]
    assert len(ids) == 48
    assert _rel_err(Engine(back).logits(ids), Engine(src).logits(ids)) <= MAX_REL_ERR
    _check_tokenizer(src, back)


REFUSED = {  # name -> (build the source, what the UnsupportedError says)
    "qwen2-swa": (lambda: _hf("qwen2-swa"), "only some layers"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_export_refuses_what_llama_cpp_would_misread(tmp_path, case):
    build, match = REFUSED[case]
    with pytest.raises(UnsupportedError, match=match):
        export_gguf(build(), tmp_path / "m.gguf")
    assert list(tmp_path.iterdir()) == []


def test_llama3_rope_scaling_travels_as_rope_freqs(tmp_path):
    """llama3 scaling -> rope_freqs.weight (D/2,) F32 divisors, no rope.scaling keys; llama rows permuted."""
    from modelc.kernels.elementwise.rope import rope_inv_freq

    src = _hf("llama3")
    back, path = _roundtrip(src, tmp_path)
    fields = parse_gguf(path).fields
    assert not any(k.startswith("llama.rope.scaling") for k in fields)
    assert "rope_scaling" not in back.config and back.config["rope_freqs_tensor"] == "rope_freqs.weight"
    factors = back.tensors["rope_freqs.weight"].array()
    assert factors.dtype == np.float32 and factors.shape == (8,)
    cfg = src.config
    plain, scaled = rope_inv_freq(16, cfg["rope_theta"]), rope_inv_freq(16, cfg["rope_theta"], cfg["rope_scaling"])
    np.testing.assert_allclose(plain / factors, scaled, rtol=1e-6)
    assert factors.min() == 1.0 and factors.max() == 8.0 and ((factors > 1) & (factors < 8)).any()  # all 3 bands


def test_phi3_keeps_fused_weights_and_partial_rotary(tmp_path):
    src = _hf("phi3-partial")
    back, path = _roundtrip(src, tmp_path)
    fields = parse_gguf(path).fields
    assert fields["phi3.rope.dimension_count"] == 8 and fields["phi3.attention.sliding_window"] == 0
    assert fields["phi3.rope.scaling.original_context_length"] == 4096
    for hf_name, gguf_name in (("self_attn.qkv_proj", "attn_qkv"), ("mlp.gate_up_proj", "ffn_up")):
        want = src.tensors[f"model.layers.1.{hf_name}.weight"].array()
        np.testing.assert_array_equal(back.tensors[f"blk.1.{gguf_name}.weight"].array(), want)


def test_gpt2_conv1d_weights_are_transposed(tmp_path):
    src = tiny_gpt2()
    back, path = _roundtrip(src, tmp_path)
    for hf_name, gguf_name in (("attn.c_attn", "attn_qkv"), ("mlp.c_fc", "ffn_up"), ("mlp.c_proj", "ffn_down")):
        want = src.tensors[f"transformer.h.0.{hf_name}.weight"].array().T  # (in, out) -> (out, in)
        np.testing.assert_array_equal(back.tensors[f"blk.0.{gguf_name}.weight"].array(), want)
    assert "output.weight" not in back.tensors and back.config["tie_word_embeddings"]
    assert parse_gguf(path).fields["gpt2.attention.layer_norm_epsilon"] == pytest.approx(1e-5)


def test_gpt2_matches_llama_cpp_converter(shared_fixtures, tmp_path):
    """The tiny-gpt2 fixture (convert_hf_to_gguf output) turned back into HF names exports to the same file."""
    ref_path = shared_fixtures / "models" / "tiny-gpt2" / "gguf" / "tiny-gpt2-F32.gguf"
    ref = read_gguf(ref_path)
    hf_names = {"token_embd": "wte", "position_embd": "wpe", "output_norm": "ln_f"}
    blk = {"attn_norm": "ln_1", "attn_qkv": "attn.c_attn", "attn_output": "attn.c_proj", "ffn_norm": "ln_2",
           "ffn_up": "mlp.c_fc", "ffn_down": "mlp.c_proj"}  # fmt: skip
    tensors = {}
    for name, t in ref.tensors.items():
        stem, _, kind = name.rpartition(".")
        if stem.startswith("blk."):
            _, i, part = stem.split(".")
            hf = f"transformer.h.{i}.{blk[part]}.{kind}"
        else:
            hf = f"transformer.{hf_names[stem]}.{kind}"
        conv1d = hf.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight"))  # HF keeps these (in, out)
        tensors[hf] = TensorData.from_array(np.ascontiguousarray(t.array().T) if conv1d else t.array())
    cfg = {**ref.config, "hidden_act": "gelu_new"}
    src = Model("hf", "gpt2", tensors, cfg, tokenizer_json=ref.tokenizer_json, special_tokens=ref.special_tokens,
                source_format="test", naming="hf")  # fmt: skip
    back, path = _roundtrip(src, tmp_path)
    assert sorted(back.tensors) == sorted(ref.tensors)
    for name, t in ref.tensors.items():
        assert bytes(back.tensors[name].data) == bytes(t.data), name
    ours, theirs = parse_gguf(path).fields, parse_gguf(ref_path).fields
    for key in ("gpt2.context_length", "gpt2.embedding_length", "gpt2.feed_forward_length", "gpt2.block_count",
                "gpt2.attention.head_count", "gpt2.attention.layer_norm_epsilon", "tokenizer.ggml.model",
                "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.merges",
                "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"):  # fmt: skip
        assert ours[key] == theirs[key], key
    assert list(ours["tokenizer.ggml.token_type"]) == list(theirs["tokenizer.ggml.token_type"])
    assert back.special_tokens == ref.special_tokens


def test_block_quantized_llama_rows_move_whole(tmp_path):
    """A q8_0-packed model exports its blocks as they are (q/k rows permuted whole) and computes the same."""
    from modelc.ir import DataType
    from modelc.pack import pack

    art = open_artifact(pack(VARIANTS / "mistral" / "hf", out=tmp_path / "q.modelc", quantize="q8_0"))
    assert art.tensors["model.layers.0.self_attn.q_proj.weight"].dtype is DataType.Q8_0
    back = read_gguf(export_gguf(art, tmp_path / "q.gguf"))
    assert back.tensors["blk.0.attn_q.weight"].dtype is DataType.Q8_0
    ids = list(range(4, 40))
    got, want = Engine(back).logits(ids), Engine(art).logits(ids)
    # q/k rows in GGUF's order round RoPE's inputs differently (~1e-7); where prefill quantizes activations to
    # int8 (AMX), that can flip one activation code of a position: ~1e-3 there (seen at 1 position of 36)
    per_pos = np.abs(got - want).max(axis=1) / np.abs(want).max()
    assert np.sum(per_pos > MAX_REL_ERR) <= 2 and per_pos.max() <= 1e-2


def test_phi3_named_model_without_phi3_pieces_drops_general_name(tmp_path):
    """llama.cpp keys a Phi-3 token-attribute rule on general.name and fails on a vocabulary without <unk>."""
    src = _hf("phi3")
    src.name = "my-Phi3-test"
    fields = parse_gguf(export_gguf(src, tmp_path / "a.gguf")).fields
    assert "general.name" not in fields
    src.name = "tiny"
    assert parse_gguf(export_gguf(src, tmp_path / "b.gguf")).fields["general.name"] == "tiny"


def test_word_level_tokenizer_gets_no_gguf_tokenizer(tmp_path):
    """No tokenizer.ggml.model: llama.cpp refuses such a file rather than misreading it; modelc keeps its copy."""
    from modelc.models.tiny import make_tiny_llama, with_tokenizer

    src = with_tokenizer(make_tiny_llama())
    fields = parse_gguf(export_gguf(src, tmp_path / "m.gguf")).fields
    assert fields["general.architecture"] == "llama" and "tokenizer.ggml.model" not in fields
    assert fields["modelc.tokenizer_json"] == src.tokenizer_json


@pytest.mark.parametrize("kind,dtype", [("q8_0", "F32"), ("bf16", "BF16"), ("f16", "F16")])
def test_packed_gpt2_conv1d_weights_export_transposed(tmp_path, kind, dtype):
    """Packed (in, out) Conv1D weights: BF16/F16 transposed as they are, GGML blocks dequantized first."""
    from modelc.pack import pack

    write_artifact(tiny_gpt2(), tmp_path / "f.modelc")
    art = open_artifact(pack(tmp_path / "f.modelc", out=tmp_path / "q.modelc", quantize=kind))
    back = read_gguf(export_gguf(art, tmp_path / "q.gguf"))
    w = back.tensors["blk.1.ffn_down.weight"]
    assert w.dtype.value == dtype and w.shape == (64, 256)
    ids = list(range(4, 40))
    assert _rel_err(Engine(back).logits(ids), Engine(art).logits(ids)) <= MAX_REL_ERR
