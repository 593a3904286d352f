from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from modelc.errors import FormatError, UnsupportedError
from modelc.formats.detect import detect_format, read_model

from .gguf_factory import write_tiny_llama
from .test_hf import make_folder
from .torch_factory import write_checkpoint


def test_by_extension_and_directory(tmp_path):
    for name, fmt in [
        ("a.safetensors", "safetensors"),
        ("a.gguf", "gguf"),
        ("a.onnx", "onnx"),
        ("a.pt", "pytorch"),
        ("a.pth", "pytorch"),
        ("a.bin", "pytorch"),
        ("a.modelc", "modelc"),
        ("m.safetensors.index.json", "safetensors"),
    ]:
        (tmp_path / name).write_bytes(b"x")
        assert detect_format(tmp_path / name) == fmt
    assert detect_format(tmp_path) == "hf"
    assert detect_format(tmp_path / "a.gguf", override="onnx") == "onnx"


def test_by_sniffing(tmp_path):
    write_tiny_llama(tmp_path / "g")
    assert detect_format(tmp_path / "g") == "gguf"
    save_file({"w": np.ones(2, np.float32)}, str(tmp_path / "s"))
    assert detect_format(tmp_path / "s") == "safetensors"
    write_checkpoint(tmp_path / "t", {"w": np.ones(2, np.float32)})
    assert detect_format(tmp_path / "t") == "pytorch"
    (tmp_path / "m").write_bytes(b"MODELC\0\0" + b"\0" * 20)
    assert detect_format(tmp_path / "m") == "modelc"
    write_tiny_llama(tmp_path / "ggml-model.bin")
    assert detect_format(tmp_path / "ggml-model.bin") == "gguf"


def test_unknown_and_missing(tmp_path):
    (tmp_path / "mystery").write_bytes(b"hello there, not a model")
    with pytest.raises(FormatError, match="pass -f"):
        detect_format(tmp_path / "mystery")
    with pytest.raises(FormatError, match="no such file"):
        detect_format(tmp_path / "nope.gguf")
    with pytest.raises(FormatError, match="unknown format"):
        detect_format(tmp_path / "mystery", override="tflite")


def test_read_model_dispatch(tmp_path):
    write_tiny_llama(tmp_path / "x.gguf")
    m = read_model(tmp_path / "x.gguf", name="named")
    assert m.source_format == "gguf" and m.name == "named"
    folder = make_folder(tmp_path)
    assert read_model(folder).source_format == "hf"
    # a lone weights file beside config.json gets the folder's config and tokenizer
    lone = read_model(folder / "model.safetensors")
    assert lone.source_format == "safetensors" and lone.architecture == "llama" and lone.tokenizer_json
    write_checkpoint(folder / "other.pt", {"model.embed_tokens.weight": np.ones((8, 16), np.float32)})
    pt = read_model(folder / "other.pt")
    assert pt.source_format == "pytorch" and pt.config["hidden_size"] == 16
    (tmp_path / "a.modelc").write_bytes(b"MODELC\0\0")
    with pytest.raises(UnsupportedError):
        read_model(tmp_path / "a.modelc")
    plain = tmp_path / "plain"
    plain.mkdir()
    save_file({"w": np.ones(2, np.float32)}, str(plain / "w.safetensors"))
    m = read_model(plain / "w.safetensors")
    assert m.architecture == "" and m.config == {}
    assert json.dumps(m.metadata)


def test_onnx_dispatch(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "W")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "g", [x], [y], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "m.onnx"))
    m = read_model(tmp_path / "m.onnx", name="tiny")
    assert m.source_format == "onnx" and m.name == "tiny" and "W" in m.tensors
