from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from safetensors.numpy import save_file

from modelc.errors import FormatError, UnsupportedError
from modelc.formats.safetensors import read_safetensors
from modelc.ir import DataType


def raw_file(header: dict, data: bytes = b"") -> bytes:
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


def test_roundtrip_with_the_safetensors_library(tmp_path):
    rng = np.random.default_rng(1)
    arrays = {
        "a.weight": rng.standard_normal((3, 5)).astype(np.float32),
        "b.bias": rng.standard_normal(7).astype(np.float16),
        "c.ids": np.arange(6, dtype=np.int64).reshape(2, 3),
        "empty": np.zeros((0, 4), np.float32),
    }
    p = tmp_path / "m.safetensors"
    save_file(arrays, str(p), metadata={"format": "pt", "note": "x", "architecture": "mlp"})
    m = read_safetensors(p)
    assert m.metadata == {"format": "pt", "note": "x", "architecture": "mlp"} and m.source_format == "safetensors"
    assert m.architecture == "mlp" and m.naming == "hf"
    for name, a in arrays.items():
        t = m.tensors[name]
        assert t.shape == a.shape
        np.testing.assert_array_equal(t.array(), a)
        assert not t.data.flags.owndata  # a view into the map, not a copy


def test_bf16(tmp_path):
    p = tmp_path / "m.safetensors"
    vals = np.array([0x3F80, 0x4000], dtype="<u2")  # 1.0, 2.0 in bf16
    p.write_bytes(raw_file({"w": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}}, vals.tobytes()))
    t = read_safetensors(p).tensors["w"]
    assert t.dtype is DataType.BF16 and t.array().tolist() == [0x3F80, 0x4000]


def test_sharded(tmp_path):
    save_file({"x": np.ones(3, np.float32)}, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file({"y": np.zeros(2, np.float32)}, str(tmp_path / "model-00002-of-00002.safetensors"))
    index = {"weight_map": {"x": "model-00001-of-00002.safetensors", "y": "model-00002-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    m = read_safetensors(tmp_path / "model.safetensors.index.json")
    assert sorted(m.tensors) == ["x", "y"] and m.name == "model"


@pytest.mark.parametrize(
    ("header", "data", "match"),
    [
        ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8, "outside"),
        ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}}, b"\0" * 16, "needs 16"),
        ({"w": {"dtype": "F32", "shape": [1 << 30, 1 << 28], "data_offsets": [0, 16]}}, b"\0" * 16, "w"),
        ({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 16]}}, b"\0" * 16, "bad shape"),
        (
            {
                "w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "v": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
            },
            b"\0" * 16,
            "overlap",
        ),
        ({"w": {"dtype": "F32", "shape": [2]}}, b"\0" * 8, "data_offsets"),
        ({"w": [1, 2]}, b"", "not an object"),
    ],
)
def test_bad_headers(tmp_path, header, data, match):
    p = tmp_path / "bad.safetensors"
    p.write_bytes(raw_file(header, data))
    with pytest.raises(FormatError, match=match) as e:
        read_safetensors(p)
    assert "\n" not in str(e.value)


def test_unknown_dtype_names_the_tensor(tmp_path):
    p = tmp_path / "bad.safetensors"
    p.write_bytes(raw_file({"layer.w": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}}, b"\0\0"))
    with pytest.raises(UnsupportedError, match="unsupported type F8_E4M3 in tensor layer.w"):
        read_safetensors(p)


def test_duplicate_names(tmp_path):
    p = tmp_path / "bad.safetensors"
    h = b'{"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, "w": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}}'
    p.write_bytes(struct.pack("<Q", len(h)) + h + b"\0\0")
    with pytest.raises(FormatError, match="duplicate tensor name 'w'"):
        read_safetensors(p)


def test_truncated_and_insane_header_length(tmp_path):
    p = tmp_path / "bad.safetensors"
    good = raw_file({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 16)
    for cut in (0, 5, 8, 20, len(good) - 1):
        p.write_bytes(good[:cut])
        with pytest.raises(FormatError):
            read_safetensors(p)
    p.write_bytes(struct.pack("<Q", 1 << 62) + b"{}")
    with pytest.raises(FormatError, match="not sane"):
        read_safetensors(p)
    p.write_bytes(struct.pack("<Q", 4) + b"\xff\xfe{]")
    with pytest.raises(FormatError, match="not valid JSON"):
        read_safetensors(p)


def test_shard_index_errors(tmp_path):
    save_file({"x": np.ones(3, np.float32)}, str(tmp_path / "a.safetensors"))
    idx = tmp_path / "model.safetensors.index.json"
    idx.write_text(json.dumps({"weight_map": {"x": "a.safetensors", "y": "a.safetensors"}}))
    with pytest.raises(FormatError, match="tensor y is listed"):
        read_safetensors(idx)
    idx.write_text(json.dumps({"weight_map": {"x": "../a.safetensors"}}))
    with pytest.raises(FormatError, match="plain file name"):
        read_safetensors(idx)
    idx.write_text(json.dumps({"weight_map": {"x": "missing.safetensors"}}))
    with pytest.raises(FormatError, match="missing"):
        read_safetensors(idx)
