"""Structural checks at pack time: one clear line, exit 1, nothing left behind (no output file, no store entry)."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from modelc import store
from modelc.artifact.structure import StructureError, check_structure
from modelc.cli.main import main
from modelc.formats.export_safetensors import export_safetensors
from modelc.ir import TensorData
from modelc.models.tiny import make_tiny_gpt2, make_tiny_llama


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MODELC_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def hf_folder(m, folder):
    """An HF llama checkpoint folder (config.json + model.safetensors) of `m`."""
    folder.mkdir()
    export_safetensors(m, folder / "model.safetensors")
    cfg = {**m.config, "model_type": "llama", "architectures": ["LlamaForCausalLM"]}
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def refused(capsys, tmp_path, src, *words: str) -> str:
    """`modelc pack SRC -o OUT` and `modelc pack SRC --name x` both fail with one line holding `words`."""
    out = tmp_path / "out.modelc"
    for target in (["-o", str(out)], ["--name", "x"]):
        assert main(["pack", str(src), *target]) == 1
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("error:"), err
        assert all(w in err for w in words), err
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".out.modelc")]
    assert not store.models_dir().exists() or not any(store.models_dir().rglob("*.modelc"))
    return err


@pytest.mark.parametrize("make", [make_tiny_llama, make_tiny_gpt2])
def test_complete_models_pass(make):
    check_structure(make(0))


def test_llama_tied_fused_and_biased_variants_pass():
    check_structure(make_tiny_llama(0, tie=True, qkv_bias=True))
    m = make_tiny_llama(0)
    p = "model.layers.0."
    q, k, v = (m.tensors.pop(p + f"self_attn.{x}_proj.weight").array() for x in "qkv")
    m.tensors[p + "self_attn.qkv_proj.weight"] = TensorData.from_array(np.concatenate([q, k, v]))
    g, u = (m.tensors.pop(p + f"mlp.{x}_proj.weight").array() for x in ("gate", "up"))
    m.tensors[p + "mlp.gate_up_proj.weight"] = TensorData.from_array(np.concatenate([g, u]))
    check_structure(m)


def test_missing_tensor_names_it(home, tmp_path, capsys):
    m = make_tiny_llama(0)
    del m.tensors["model.layers.1.mlp.down_proj.weight"]
    with pytest.raises(StructureError, match="lacks tensor model.layers.1.mlp.down_proj.weight"):
        check_structure(m)
    refused(capsys, tmp_path, hf_folder(m, tmp_path / "hf"), "model.layers.1.mlp.down_proj.weight")


def test_wrong_shape_names_both_shapes(home, tmp_path, capsys):
    m = make_tiny_llama(0)  # C=64, K*D=32
    m.tensors["model.layers.0.self_attn.k_proj.weight"] = TensorData.from_array(np.zeros((64, 64), np.float32))
    src = hf_folder(m, tmp_path / "hf")
    refused(capsys, tmp_path, src, "model.layers.0.self_attn.k_proj.weight", "(64, 64)", "(32, 64)")


def test_a_checkpoint_folder_with_another_models_tokenizer_is_refused(home, tmp_path, capsys):
    """The audit's case: an HF folder whose tokenizer.json has more tokens than the model's 96 embedding
    rows (a tokenizer from another model) is refused by `modelc pack`, both counts on one line."""
    from tests.server.tiny_model import byte_tokenizer_json

    src = hf_folder(make_tiny_llama(0), tmp_path / "hf")  # vocab_size 96
    tokenizer = byte_tokenizer_json()  # 256 byte tokens and the specials
    (src / "tokenizer.json").write_text(tokenizer)
    num_tokens = 1 + max(json.loads(tokenizer)["model"]["vocab"].values())
    refused(capsys, tmp_path, src, f"{num_tokens} tokens", "96 token embedding rows")


def test_gpt2_wrong_shape(home, tmp_path):
    m = make_tiny_gpt2(0)
    name = next(n for n in m.tensors if n.endswith("mlp.c_fc.bias"))
    m.tensors[name] = TensorData.from_array(np.zeros(3, np.float32))
    with pytest.raises(StructureError, match=r"\(3,\).*the config implies"):
        check_structure(m)


def test_config_without_a_required_count_is_refused():
    m = make_tiny_llama(0)
    del m.config["num_attention_heads"]
    with pytest.raises(StructureError, match="lacks num_attention_heads"):
        check_structure(m)


def safetensors_bytes(header: dict, data: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


F4 = {"dtype": "F32", "shape": [2]}


@pytest.mark.parametrize(
    ("header", "data", "words"),
    [
        ({"a": {**F4, "data_offsets": [0, 8]}, "b": {**F4, "data_offsets": [12, 20]}}, b"\0" * 20, ["hole of 4"]),
        ({"a": {**F4, "data_offsets": [4, 12]}}, b"\0" * 12, ["hole of 4", "before the first tensor"]),
        ({"a": {**F4, "data_offsets": [0, 8]}, "b": {**F4, "data_offsets": [4, 12]}}, b"\0" * 12, ["overlap"]),
        ({"a": {**F4, "data_offsets": [0, 8]}}, b"\0" * 12, ["4 bytes at the end"]),
        ({"__metadata__": {"format": 1}, "a": {**F4, "data_offsets": [0, 8]}}, b"\0" * 8, ["__metadata__", "int"]),
        ({"__metadata__": {"x": {"y": "z"}}, "a": {**F4, "data_offsets": [0, 8]}}, b"\0" * 8, ["not a string"]),
    ],
)
def test_malformed_safetensors_refused(home, tmp_path, capsys, header, data, words):
    src = tmp_path / "bad.safetensors"
    src.write_bytes(safetensors_bytes(header, data))
    refused(capsys, tmp_path, src, *words)


def test_misaligned_gguf_offset_refused(home, tmp_path, capsys):
    from tests.formats.test_gguf import raw_gguf

    src = tmp_path / "bad.gguf"
    src.write_bytes(raw_gguf([("a", (4,), 0, 0), ("b", (4,), 0, 16)], data=b"\0" * 64))  # alignment 32
    refused(capsys, tmp_path, src, "tensor b offset 16", "alignment 32")


@pytest.mark.parametrize("opset", [12, 99])
def test_onnx_opset_outside_the_interpreter_refused(home, tmp_path, capsys, opset):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    src = tmp_path / "m.onnx"
    onnx.save(model, str(src))
    refused(capsys, tmp_path, src, f"ONNX opset {opset}", "13-21")


def test_mixture_of_experts_ffn_is_left_to_its_loader():
    m = make_tiny_llama(0)
    for i in range(2):
        for p in ("gate", "up", "down"):
            del m.tensors[f"model.layers.{i}.mlp.{p}_proj.weight"]
    with pytest.raises(StructureError, match="gate_up_proj"):
        check_structure(m)
    m.config["num_experts"] = 4
    check_structure(m)


def test_a_tensor_without_a_name_is_refused(home, tmp_path, capsys):
    """A GGUF whose tensor count runs one past its infos reads a nameless tensor from the padding: it was packed
    into an artifact its own reader refuses ("tensor table row 0 has no name")."""
    from tests.formats.test_gguf import raw_gguf

    src = tmp_path / "bad.gguf"
    src.write_bytes(raw_gguf([("a", (4,), 0, 0), ("", (4,), 0, 32)], data=b"\0" * 64))
    refused(capsys, tmp_path, src, "tensor 1 has an empty name")
    from modelc.artifact import write_artifact
    from modelc.artifact.writer import ArtifactWriteError

    m = make_tiny_llama(0)
    m.tensors[""] = m.tensors["model.norm.weight"]
    with pytest.raises(ArtifactWriteError, match="empty name"):
        write_artifact(m, tmp_path / "x.modelc")
    assert not list(tmp_path.glob("*x.modelc*"))


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"max_position_embeddings": 2**32 - 1}, ["max_position_embeddings = 4294967295"]),
        ({"rope_scaling": {"rope_type": "linear", "factor": "z"}}, ["rope_scaling factor", "'z'"]),
        ({"rope_scaling": {"rope_type": "linear", "factor": 0}}, ["rope_scaling factor", "positive"]),
        ({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, ["unsupported rope scaling type 'dynamic'"]),
        (
            {"rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 2, "high_freq_factor": 2}},
            ["differ"],
        ),
        ({"sliding_window": -5}, ["sliding_window", "-5"]),
        ({"hidden_act": "relu"}, ["hidden_act 'relu'"]),
    ],
)
def test_a_config_its_loader_refuses_is_refused_at_pack(home, tmp_path, capsys, change, words):
    """These configs packed, and the model then failed to load (a string rope factor as a bare ValueError, a
    zero factor as NaN frequencies): a pack that succeeds must load."""
    m = make_tiny_llama(0)
    m.config.update(change)
    refused(capsys, tmp_path, hf_folder(m, tmp_path / "hf"), *words)


def test_a_chat_template_that_does_not_compile_is_refused_at_pack(home, tmp_path, capsys):
    """A model whose template does not compile cannot load at all (the runtime compiles it on load)."""
    src = hf_folder(make_tiny_llama(0), tmp_path / "hf")
    (src / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}")
    refused(capsys, tmp_path, src, "chat template does not compile", "--chat-template")
    good = tmp_path / "good.jinja"
    good.write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    assert main(["pack", str(src), "-o", str(tmp_path / "ok.modelc"), "--chat-template", str(good)]) == 0


def test_a_tokenizer_the_library_cannot_build_is_refused():
    """A GGUF whose merges name a token its vocabulary lacks converted to a tokenizer.json that packed, then
    failed every load ('invalid tokenizer.json: Token `qz` out of vocabulary')."""
    from pathlib import Path

    from modelc.errors import FormatError
    from modelc.formats.gguf import read_gguf

    m = read_gguf(Path(__file__).parents[1] / "fixtures" / "models" / "quant" / "llama" / "model-Q4_K_M.gguf")
    check_structure(m)
    doc = json.loads(m.tokenizer_json)
    merges = doc["model"]["merges"]
    merges[0] = "qq zz" if isinstance(merges[0], str) else ["qq", "zz"]
    m.tokenizer_json = json.dumps(doc)
    with pytest.raises(FormatError, match="the model's tokenizer cannot be built: Token `qq` out of vocabulary"):
        check_structure(m)
