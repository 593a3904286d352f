from __future__ import annotations

import pathlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from modelc.engine.infer import Inferencer, supports_infer
from modelc.errors import InvalidRequestError, UnsupportedError
from modelc.formats.onnx import read_onnx
from modelc.ir import Model, TensorData

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)
W0, B0 = RNG.standard_normal((5, 4)).astype(np.float32), RNG.standard_normal(5).astype(np.float32)
W1, B1 = RNG.standard_normal((3, 5)).astype(np.float32), RNG.standard_normal(3).astype(np.float32)


def ref_mlp(x: np.ndarray) -> np.ndarray:
    return np.maximum(x @ W0.T + B0, 0) @ W1.T + B1


@pytest.fixture
def mlp() -> Inferencer:
    t = {"layer0.weight": W0, "layer0.bias": B0, "layer1.weight": W1, "layer1.bias": B1}
    return Inferencer(Model("m", "mlp", {k: TensorData.from_array(v) for k, v in t.items()}))


def onnx_file(tmp_path: pathlib.Path, nodes, inputs, outputs, inits) -> pathlib.Path:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    return path


@pytest.fixture
def onnx_mlp(tmp_path: pathlib.Path) -> Inferencer:
    """The same MLP as an ONNX graph with input x: [N, 4]."""
    n = helper.make_node
    nodes = [
        n("Gemm", ["x", "w0", "b0"], ["h"], transB=1),
        n("Relu", ["h"], ["r"]),
        n("Gemm", ["r", "w1", "b1"], ["y"], transB=1),
    ]
    inits = [numpy_helper.from_array(a, k) for k, a in (("w0", W0), ("b0", B0), ("w1", W1), ("b1", B1))]
    path = onnx_file(tmp_path, nodes, [helper.make_tensor_value_info("x", F, ["N", 4])],
                     [helper.make_tensor_value_info("y", F, ["N", 3])], inits)  # fmt: skip
    return Inferencer(read_onnx(path))


@pytest.mark.parametrize("which", ["mlp", "onnx_mlp"])
def test_seed_spec_shapes(which: str, request: pytest.FixtureRequest) -> None:
    inf: Inferencer = request.getfixturevalue(which)
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    out = inf.infer({"input": x[0].tolist()})
    np.testing.assert_allclose(out["output"], ref_mlp(x[:1])[0], rtol=1e-5, atol=1e-5)
    assert isinstance(out["output"][0], float)
    outs = inf.infer({"inputs": x.tolist()})["outputs"]
    np.testing.assert_allclose(np.array(outs), ref_mlp(x), rtol=1e-5, atol=1e-5)
    nested = inf.infer({"input": x[:2].tolist()})["output"]  # in the graph's shape [N, 4] -> [N, 3]
    np.testing.assert_allclose(np.array(nested), ref_mlp(x[:2]), rtol=1e-5, atol=1e-5)


def test_batch_is_one_run(mlp: Inferencer) -> None:
    calls = []
    forward = mlp.mlp.forward
    mlp.mlp.forward = lambda x: calls.append(x.shape) or forward(x)
    mlp.infer({"inputs": [[0.0, 1.0, 2.0, 3.0]] * 7})
    assert calls == [(7, 4)]


def test_named_inputs_and_outputs(tmp_path: pathlib.Path) -> None:
    n = helper.make_node
    path = onnx_file(
        tmp_path,
        [n("Add", ["a", "b"], ["sum"]), n("Mul", ["a", "b"], ["prod"])],
        [helper.make_tensor_value_info("a", F, [2, 2]), helper.make_tensor_value_info("b", F, [2])],
        [helper.make_tensor_value_info("sum", F, [2, 2]), helper.make_tensor_value_info("prod", F, [2, 2])],
        [],
    )
    inf = Inferencer(read_onnx(path))
    out = inf.infer({"inputs": {"a": [[1, 2], [3, 4]], "b": [10, 20]}})
    assert out == {"outputs": {"sum": [[11.0, 22.0], [13.0, 24.0]], "prod": [[10.0, 40.0], [30.0, 80.0]]}}
    with pytest.raises(InvalidRequestError, match="send 'inputs' as an object by name"):
        inf.infer({"input": [1, 2]})
    with pytest.raises(InvalidRequestError, match="missing input 'b'"):
        inf.infer({"inputs": {"a": [[1, 2], [3, 4]]}})


def test_fixed_shape_graph_flat_and_example_forms(tmp_path: pathlib.Path) -> None:
    """An image-like input [1, 2, 3]: flat lists are reshaped, nested examples may omit the batch dim."""
    n = helper.make_node
    path = onnx_file(tmp_path, [n("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", F, [1, 2, 3])],
                     [helper.make_tensor_value_info("y", F, [1, 2, 3])], [])  # fmt: skip
    inf = Inferencer(read_onnx(path))
    flat = [-1.0, 2.0, -3.0, 4.0, -5.0, 6.0]
    assert inf.infer({"input": flat}) == {"output": [0.0, 2.0, 0.0, 4.0, 0.0, 6.0]}
    assert inf.infer({"input": [[-1, 2, -3], [4, -5, 6]]}) == {"output": [[0.0, 2.0, 0.0], [4.0, 0.0, 6.0]]}
    assert inf.infer({"input": [[[-1, 2, -3], [4, -5, 6]]]}) == {"output": [[[0.0, 2.0, 0.0], [4.0, 0.0, 6.0]]]}
    assert inf.infer({"inputs": [flat, flat]})["outputs"] == [[0.0, 2.0, 0.0, 4.0, 0.0, 6.0]] * 2
    with pytest.raises(InvalidRequestError, match="must have 6 numbers, got 5"):
        inf.infer({"input": flat[:5]})


@pytest.mark.parametrize(
    "body,match",
    [
        ({}, "exactly one of 'input'"),
        ({"input": [1, 2, 3, 4], "inputs": []}, "exactly one of 'input'"),
        ({"inputs": []}, "non-empty list"),
        ({"inputs": "abc"}, "non-empty list"),
        ({"input": [1, 2, 3]}, r"must have (4 features|shape \[N, 4\]), got shape \[1, 3\]"),
        ({"input": [1, 2, "x", 4]}, "must hold numbers"),
        ({"input": [1, 2, float("nan"), 4]}, "NaN or infinity"),
        ({"input": [[1, 2, 3, 4], [1, 2]]}, "ragged"),
        ({"inputs": [[1, 2, 3, 4], [1, 2, 3]]}, r"must have (4 features|shape \[N, 4\]), got shape \[1, 3\]"),
        ({"input": {"other": [1, 2, 3, 4]}}, "unknown input 'other'"),
    ],
)
@pytest.mark.parametrize("which", ["mlp", "onnx_mlp"])
def test_bad_requests(which: str, body: dict, match: str, request: pytest.FixtureRequest) -> None:
    inf: Inferencer = request.getfixturevalue(which)
    if which == "mlp" and "unknown input" in match:
        match = "one input, named 'input'"
    with pytest.raises(InvalidRequestError, match=match):
        inf.infer(body)


def test_supports_infer() -> None:
    assert supports_infer(Model("m", "mlp", {})) and supports_infer(Model("m", "onnx", {}))
    assert not supports_infer(Model("m", "llama", {}))
    with pytest.raises(UnsupportedError, match="needs an MLP or ONNX model"):
        Inferencer(Model("m", "llama", {}))
