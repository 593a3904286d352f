from __future__ import annotations

import json

import numpy as np
import pytest

from modelc.artifact import open_artifact, write_artifact
from modelc.artifact.tiny import make_model
from modelc.errors import UnsupportedError
from modelc.formats.export_gguf import export_gguf
from modelc.formats.export_safetensors import export_safetensors
from modelc.formats.gguf import read_gguf
from modelc.formats.safetensors import read_tensors
from modelc.ir import SCALE_SUFFIX, DataType, TensorData
from modelc.kernels.matmul.linear import dequantize

GGUF_FIXTURES = [
    "tiny-llama/gguf/tiny-llama-F32.gguf",
    "tiny-llama/gguf/tiny-llama-Q4_0.gguf",
    "tiny-llama/gguf/tiny-llama-Q8_0.gguf",
    "tiny-gpt2/gguf/tiny-gpt2-Q8_0.gguf",
]


def same_bytes(a, b) -> bool:
    return a.shape == b.shape and a.dtype is b.dtype and bytes(a.data) == bytes(b.data)


def test_safetensors_export_plain_bytes_and_dequantized(tmp_path):
    model = make_model()
    art = open_artifact(write_artifact(model, tmp_path / "m.modelc"))
    path = export_safetensors(art, tmp_path / "m.safetensors")
    tensors, meta = read_tensors(path)
    assert sorted(tensors) == sorted(n for n in model.tensors if not n.endswith(SCALE_SUFFIX))
    for name in ("model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight", "model.norm.weight", "empty"):
        assert same_bytes(tensors[name], model.tensors[name])
    q = "model.layers.0.self_attn.q_proj.weight"
    assert tensors[q].dtype is DataType.F32
    np.testing.assert_array_equal(tensors[q].array(), dequantize(model.tensors[q]))
    d = "model.layers.0.mlp.down_proj.weight"  # I8 with per-row scale -> F32 values
    np.testing.assert_array_equal(tensors[d].array(), model.tensors[d].array().astype(np.float32))
    assert meta["modelc.architecture"] == "llama" and json.loads(meta["modelc.config"]) == model.config
    assert meta["modelc.tokenizer_json"] == model.tokenizer_json
    with pytest.raises(UnsupportedError, match="cannot hold"):
        export_safetensors(art, tmp_path / "n.safetensors", dequantize=False)
    assert not (tmp_path / "n.safetensors").exists()


def test_gguf_export_keeps_block_bytes(tmp_path):
    model = make_model()
    art = open_artifact(write_artifact(model, tmp_path / "m.modelc", compress="zstd"))
    back = read_gguf(export_gguf(art, tmp_path / "m.gguf"))
    for name, t in model.tensors.items():
        if name.endswith(SCALE_SUFFIX):
            assert name not in back.tensors
        elif t.dtype is DataType.I8:
            assert back.tensors[name].dtype is DataType.F32
        else:
            assert same_bytes(back.tensors[name], t), name
    assert back.chat_template == model.chat_template


def test_gguf_export_refuses_types_gguf_lacks(tmp_path):
    model = make_model()
    model.tensors["mask"] = TensorData.from_array(np.zeros(4, np.bool_))
    with pytest.raises(UnsupportedError, match="mask"):
        export_gguf(model, tmp_path / "m.gguf")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("rel", GGUF_FIXTURES)
def test_gguf_fixture_roundtrip(shared_fixtures, tmp_path, rel):
    src = read_gguf(shared_fixtures / "models" / rel)
    art = open_artifact(write_artifact(src, tmp_path / "m.modelc"), verify=True)
    assert sorted(art.tensors) == sorted(src.tensors)
    assert all(same_bytes(art.tensors[n], src.tensors[n]) for n in src.tensors)
    assert art.tokenizer_json == src.tokenizer_json and art.config == json.loads(json.dumps(src.config))
    back = read_gguf(export_gguf(art, tmp_path / "m.gguf"))
    assert all(same_bytes(back.tensors[n], src.tensors[n]) for n in src.tensors)
    assert back.architecture == src.architecture and back.config == src.config
    for key in ("general.architecture", f"{src.metadata['general.architecture']}.block_count"):
        assert back.metadata[key] == src.metadata[key]


def test_hf_safetensors_fixture_roundtrip(shared_fixtures, tmp_path):
    tensors, _ = read_tensors(shared_fixtures / "models/tiny-llama/hf/model.safetensors")
    from modelc.ir import Model

    src = Model("tiny-llama", "llama", tensors, source_format="safetensors")
    art = open_artifact(write_artifact(src, tmp_path / "m.modelc"))
    again, _ = read_tensors(export_safetensors(art, tmp_path / "m.safetensors"))
    assert sorted(again) == sorted(tensors) and all(same_bytes(again[n], tensors[n]) for n in tensors)


# the 128k/150k-token vocabularies take 20-30 s each here
VOCABS = [
    "bert-bge",
    "gpt-2",
    "llama-spm",
    pytest.param("llama-bpe", marks=pytest.mark.slow),
    pytest.param("qwen2", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("vocab", VOCABS)
def test_gguf_export_rebuilds_tokenizer_arrays(shared_fixtures, tmp_path, vocab):
    src = read_gguf(shared_fixtures / "tokenizer" / f"ggml-vocab-{vocab}.gguf")
    art = open_artifact(write_artifact(src, tmp_path / "v.modelc"))
    back = read_gguf(export_gguf(art, tmp_path / "v.gguf"))
    assert json.loads(back.tokenizer_json) == json.loads(src.tokenizer_json)
    assert back.special_tokens == src.special_tokens


def test_gguf_tokenizer_arrays_types_and_scores():
    from modelc.formats.export_gguf_tokenizer import tokenizer_arrays

    doc = {
        "added_tokens": [{"id": 0, "content": "<unk>", "special": True}, {"id": 1, "content": "<s>", "special": True}],
        "model": {"type": "BPE", "vocab": {"<unk>": 0, "<s>": 1, "<0x0A>": 2, "a": 3, "b": 4, "ab": 5, "abb": 6},
                  "merges": [["a", "b"], ["ab", "b"]]},
    }  # fmt: skip
    out = tokenizer_arrays(json.dumps(doc), {"tokenizer.ggml.model": "llama", "tokenizer.ggml.unknown_token_id": 0})
    assert out["tokenizer.ggml.tokens"] == ["<unk>", "<s>", "<0x0A>", "a", "b", "ab", "abb"]
    assert out["tokenizer.ggml.token_type"] == [2, 3, 6, 1, 1, 1, 1]
    assert out["tokenizer.ggml.scores"] == [-3.0, -3.0, -3.0, -3.0, -3.0, 0.0, -1.0]
    assert tokenizer_arrays(json.dumps(doc), {"tokenizer.ggml.model": "rwkv"}) == {}


def test_hf_llama_to_gguf_matches_llama_cpp_converter(shared_fixtures, tmp_path):
    """HF tiny-llama exported to GGUF equals llama.cpp's convert_hf_to_gguf.py output (the F32 fixture)."""
    from modelc.formats.detect import read_model
    from modelc.formats.gguf_file import parse_gguf
    from modelc.tokenizer.tokenizer import Tokenizer

    models = shared_fixtures / "models" / "tiny-llama"
    art = open_artifact(write_artifact(read_model(models / "hf"), tmp_path / "m.modelc"))
    out = export_gguf(art, tmp_path / "m.gguf")
    ours, ref = read_gguf(out), read_gguf(models / "gguf" / "tiny-llama-F32.gguf")
    assert sorted(ours.tensors) == sorted(ref.tensors)
    assert all(same_bytes(ours.tensors[n], ref.tensors[n]) for n in ref.tensors)  # names, Q/K permutation
    assert ours.config == ref.config and ours.special_tokens == ref.special_tokens
    fields, ref_fields = parse_gguf(out).fields, parse_gguf(models / "gguf" / "tiny-llama-F32.gguf").fields
    for key in (
        "tokenizer.ggml.model",
        "tokenizer.ggml.tokens",
        "tokenizer.ggml.unknown_token_id",
        "llama.rope.dimension_count",
    ):
        assert fields[key] == ref_fields[key], key
    assert list(fields["tokenizer.ggml.token_type"]) == list(ref_fields["tokenizer.ggml.token_type"])
    texts = (
        (shared_fixtures / "tokenizer" / "ggml-vocab-llama-spm.gguf.inp").read_text().split("\n__ggml_vocab_test__\n")
    )
    a = Tokenizer.from_json(ours.tokenizer_json, ours.special_tokens)
    b = Tokenizer.from_json(ref.tokenizer_json, ref.special_tokens)
    assert all(a.encode(t) == b.encode(t) for t in texts)


def test_permute_rows_moves_quantized_rows_whole():
    from modelc.formats.export_gguf_hf import permute_rows

    rows = np.arange(8 * 3).reshape(8, 3)
    got = permute_rows(rows, 2)  # per head: rows (0,1,2,3) -> (0,2,1,3)
    assert got[:, 0].tolist() == [0, 6, 3, 9, 12, 18, 15, 21]
    blocks = np.arange(8 * 34, dtype=np.uint8).reshape(8, 34)
    assert (permute_rows(blocks, 2)[1] == blocks[2]).all()
    with pytest.raises(UnsupportedError, match="cannot permute"):
        permute_rows(rows, 3)
