from __future__ import annotations

import json
import pathlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from modelc.errors import FormatError, UnsupportedError
from modelc.formats.onnx import PLAN_KEY, read_onnx
from modelc.ir import DataType
from modelc.onnx import OnnxProgram

F = TensorProto.FLOAT


def graph_model(nodes, inits, opset=17, in_shape=("N", 4), out="y") -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", F, list(in_shape))
    y = helper.make_tensor_value_info(out, F, None)
    graph = helper.make_graph(nodes, "g", [x], [y], initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def add_w(w: TensorProto) -> onnx.ModelProto:
    return graph_model([helper.make_node("Add", ["x", w.name], ["y"])], [w])


def test_plan_records_graph(tmp_path: pathlib.Path) -> None:
    w = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    nodes = [
        helper.make_node("Add", ["x", "w"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["y"], name="relu"),
    ]
    path = tmp_path / "m.onnx"
    onnx.save(graph_model(nodes, [w]), str(path))
    model = read_onnx(path)
    assert model.architecture == "onnx" and model.source_format == "onnx" and model.name == "m"
    plan = model.metadata[PLAN_KEY]
    json.dumps(plan)  # JSON-serializable
    assert plan["opset"] == 17
    assert plan["inputs"] == [{"name": "x", "shape": ["N", 4], "dtype": "F32"}]
    assert plan["outputs"][0]["name"] == "y"
    assert [n["op_type"] for n in plan["nodes"]] == ["Add", "Relu"]
    assert plan["initializers"] == ["w"]
    np.testing.assert_array_equal(model.tensors["w"].array(), np.arange(4, dtype=np.float32))


def test_nodes_are_sorted_topologically(tmp_path: pathlib.Path) -> None:
    nodes = [helper.make_node("Relu", ["a"], ["y"], name="second"), helper.make_node("Neg", ["x"], ["a"], name="first")]
    m = graph_model(nodes, [])
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    model = read_onnx(path)
    assert [n["name"] for n in model.metadata[PLAN_KEY]["nodes"]] == ["first", "second"]
    out = OnnxProgram(model).run({"x": [[-1.0, 2.0, -3.0, 4.0]]})["y"]
    np.testing.assert_array_equal(out, [[1.0, 0.0, 3.0, 0.0]])


def test_cycle_and_undefined_value_are_format_errors(tmp_path: pathlib.Path) -> None:
    cyc = graph_model([helper.make_node("Relu", ["b"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
                       helper.make_node("Relu", ["x"], ["y"])], [])  # fmt: skip
    onnx.save(cyc, str(tmp_path / "c.onnx"))
    with pytest.raises(FormatError, match="cycle"):
        read_onnx(tmp_path / "c.onnx")
    undef = graph_model([helper.make_node("Add", ["x", "nowhere"], ["y"])], [])
    onnx.save(undef, str(tmp_path / "u.onnx"))
    with pytest.raises(FormatError, match="undefined value 'nowhere'"):
        read_onnx(tmp_path / "u.onnx")


def test_unsupported_op_names_op_and_node(tmp_path: pathlib.Path) -> None:
    m = graph_model([helper.make_node("LSTM", ["x"], ["y"], name="rnn0")], [])
    onnx.save(m, str(tmp_path / "m.onnx"))
    with pytest.raises(UnsupportedError, match=r"ONNX op LSTM \(node rnn0\)"):
        read_onnx(tmp_path / "m.onnx")


def test_old_opset_is_refused(tmp_path: pathlib.Path) -> None:
    onnx.save(graph_model([helper.make_node("Relu", ["x"], ["y"])], [], opset=11), str(tmp_path / "m.onnx"))
    with pytest.raises(UnsupportedError, match="opset 11"):
        read_onnx(tmp_path / "m.onnx")


def test_not_onnx_and_missing_file(tmp_path: pathlib.Path) -> None:
    (tmp_path / "junk.onnx").write_bytes(b"\xff\xfe not a protobuf at all \x00\x01")
    with pytest.raises(FormatError):
        read_onnx(tmp_path / "junk.onnx")
    with pytest.raises(FormatError, match="no such file"):
        read_onnx(tmp_path / "absent.onnx")


@pytest.mark.parametrize(
    "make,want",
    [
        (lambda: helper.make_tensor("w", F, [4], [1.0, 2.0, 3.0, 4.0]), np.array([1, 2, 3, 4], np.float32)),
        (lambda: helper.make_tensor("w", TensorProto.INT64, [2], [7, -8]), np.array([7, -8], np.int64)),
        (lambda: helper.make_tensor("w", TensorProto.DOUBLE, [2], [0.5, 1.5]), np.array([0.5, 1.5])),
        (lambda: helper.make_tensor("w", TensorProto.INT8, [3], [-1, 0, 5]), np.array([-1, 0, 5], np.int8)),
        (lambda: helper.make_tensor("w", TensorProto.BOOL, [2], [True, False]), np.array([True, False])),
        (lambda: numpy_helper.from_array(np.array([1.5, -2.0], np.float16), "w"), np.array([1.5, -2.0], np.float16)),
        (
            lambda: helper.make_tensor("w", TensorProto.FLOAT16, [2], [1.5, -2.0]),
            np.array([1.5, -2.0], np.float16),
        ),
    ],
)
def test_typed_fields_and_raw_data(make, want, tmp_path: pathlib.Path) -> None:
    t = make()
    m = graph_model([helper.make_node("Identity", ["x"], ["y"])], [t])
    onnx.save(m, str(tmp_path / "m.onnx"))
    model = read_onnx(tmp_path / "m.onnx")
    arr = model.tensors["w"].array()
    assert arr.dtype == want.dtype
    np.testing.assert_array_equal(arr, want)


def external(name: str, location: str, offset: int, length: int, shape=(4,)) -> TensorProto:
    t = TensorProto(name=name, data_type=F, dims=list(shape))
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


def test_external_data_is_read_relative_to_model(tmp_path: pathlib.Path) -> None:
    w = np.array([1, 2, 3, 4], np.float32)
    (tmp_path / "weights.bin").write_bytes(b"\0" * 64 + w.tobytes() + b"\0" * 8)
    onnx.save(add_w(external("w", "weights.bin", 64, 16)), str(tmp_path / "m.onnx"))
    model = read_onnx(tmp_path / "m.onnx")
    np.testing.assert_array_equal(model.tensors["w"].array(), w)
    out = OnnxProgram(model).run({"x": [[1, 1, 1, 1]]})["y"]
    np.testing.assert_array_equal(out, [[2, 3, 4, 5]])


def test_external_data_written_by_onnx(tmp_path: pathlib.Path) -> None:
    w = np.random.default_rng(0).standard_normal((64, 4)).astype(np.float32)
    m = graph_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [numpy_helper.from_array(w.T.copy(), "w")])
    onnx.save(m, str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.data", size_threshold=0)
    model = read_onnx(tmp_path / "m.onnx")
    np.testing.assert_array_equal(model.tensors["w"].array(), w.T)


@pytest.mark.parametrize(
    "loc,offset,length,match",
    [
        ("../outside.bin", 0, 16, "escapes the model folder"),
        ("/etc/passwd", 0, 16, "escapes the model folder"),
        ("weights.bin", 8, 16, "outside 'weights.bin'"),
        ("weights.bin", 0, 12, "needs 16 bytes"),
        ("missing.bin", 0, 16, "not found"),
    ],
)
def test_bad_external_data(loc: str, offset: int, length: int, match: str, tmp_path: pathlib.Path) -> None:
    d = tmp_path / "model"
    d.mkdir()
    (d / "weights.bin").write_bytes(b"\0" * 16)
    (tmp_path / "outside.bin").write_bytes(b"\0" * 16)
    onnx.save(add_w(external("w", loc, offset, length)), str(d / "m.onnx"))
    with pytest.raises(FormatError, match=match):
        read_onnx(d / "m.onnx")


def test_segmented_initializer(tmp_path: pathlib.Path) -> None:
    parts = []
    for b, e in ((2, 4), (0, 2)):
        t = TensorProto(name="w", data_type=F, dims=[4])
        t.float_data.extend(float(i) for i in range(b, e))
        t.segment.begin, t.segment.end = b, e
        parts.append(t)
    onnx.save(add_w(parts[0]), str(tmp_path / "a.onnx"))
    m = add_w(parts[0])
    m.graph.initializer.append(parts[1])
    onnx.save(m, str(tmp_path / "m.onnx"))
    np.testing.assert_array_equal(read_onnx(tmp_path / "m.onnx").tensors["w"].array(), [0, 1, 2, 3])
    with pytest.raises(FormatError, match="do not tile"):
        read_onnx(tmp_path / "a.onnx")
    onnx.save(add_w(parts[1]), str(tmp_path / "b.onnx"))
    with pytest.raises(FormatError, match="segments cover 2 of 4"):
        read_onnx(tmp_path / "b.onnx")


def test_attribute_tensors_become_model_tensors(tmp_path: pathlib.Path) -> None:
    nodes = [helper.make_node("Constant", [], ["k"], value=helper.make_tensor("v", F, [4], [1, 2, 3, 4])),
             helper.make_node("Mul", ["x", "k"], ["y"])]  # fmt: skip
    onnx.save(graph_model(nodes, []), str(tmp_path / "m.onnx"))
    model = read_onnx(tmp_path / "m.onnx")
    attr = model.metadata[PLAN_KEY]["nodes"][0]["attributes"]["value"]
    assert attr["type"] == "tensor"
    t = model.tensors[attr["value"]]
    assert t.dtype is DataType.F32 and t.shape == (4,)
    np.testing.assert_array_equal(OnnxProgram(model).run({"x": [[1, 1, 1, 1]]})["y"], [[1, 2, 3, 4]])
