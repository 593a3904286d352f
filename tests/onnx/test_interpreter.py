from __future__ import annotations

import pathlib

import numpy as np
import onnx
import onnx_graphs as g
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from modelc.errors import InvalidRequestError
from modelc.formats.onnx import read_onnx
from modelc.onnx import OnnxProgram

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def both(model: onnx.ModelProto, feeds: dict[str, np.ndarray], tmp_path: pathlib.Path) -> tuple[list, list]:
    path = g.save(
        model, tmp_path / "m.onnx", check=all(o.type.tensor_type.HasField("shape") for o in model.graph.output)
    )
    prog = OnnxProgram(read_onnx(path))
    got = prog.run(feeds)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    return [got[o.name] for o in model.graph.output], want


def assert_same(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray], tmp_path: pathlib.Path, atol: float = 1e-4
) -> None:
    got, want = both(model, feeds, tmp_path)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        assert a.dtype == b.dtype, (a.dtype, b.dtype)
        np.testing.assert_allclose(a, b, atol=atol, rtol=1e-4)


@pytest.mark.parametrize("batch", [1, 5])
def test_mlp_matches_onnxruntime(batch: int, tmp_path: pathlib.Path) -> None:
    rng = np.random.default_rng(batch)
    model = g.mlp(rng, sizes=(8, 16, 12, 4))
    assert_same(model, {"x": rng.standard_normal((batch, 8)).astype(np.float32)}, tmp_path)


@pytest.mark.parametrize("B,T", [(1, 1), (2, 7), (3, 16)])
def test_transformer_block_matches_onnxruntime(B: int, T: int, tmp_path: pathlib.Path) -> None:
    rng = np.random.default_rng(T)
    model = g.transformer_block(rng)
    mask = np.ones((B, T), np.int64)
    mask[-1, T // 2 + 1 :] = 0
    assert_same(model, {"x": rng.standard_normal((B, T, 32)).astype(np.float32), "mask": mask}, tmp_path)


@pytest.mark.parametrize("N", [1, 3])
def test_cnn_matches_onnxruntime(N: int, tmp_path: pathlib.Path) -> None:
    rng = np.random.default_rng(N)
    assert_same(g.cnn(rng), {"x": rng.standard_normal((N, 3, 12, 12)).astype(np.float32)}, tmp_path)


def one_node(
    op: str, ins: list[tuple[str, int, list]], outs: list[tuple[str, int, list | None]], inits=(), opset=17, **attrs
):
    node = helper.make_node(op, [n for n, _, _ in ins] + [i.name for i in inits], [n for n, _, _ in outs], **attrs)
    vi = [helper.make_tensor_value_info(n, t, s) for n, t, s in ins]
    vo = [helper.make_tensor_value_info(n, t, s) for n, t, s in outs]
    return g.make([node], vi, vo, list(inits), opset=opset)


def c(name: str, values, dtype=np.int64):
    return g.init(name, np.array(values, dtype))


RNG = np.random.default_rng(7)
X = RNG.standard_normal((2, 3, 4)).astype(np.float32)
X4 = RNG.standard_normal((1, 2, 7, 9)).astype(np.float32)

CASES = [
    (
        "Split-input",
        one_node("Split", [("x", F, [2, 3, 4])], [("a", F, None), ("b", F, None)], [c("s", [1, 3])], axis=2),
    ),
    ("Split-even", one_node("Split", [("x", F, [2, 3, 4])], [("a", F, None), ("b", F, None)], axis=2)),
    (
        "Split-num_outputs",
        one_node("Split", [("x", F, [2, 3, 4])], [("a", F, None), ("b", F, None)], opset=18, axis=1, num_outputs=2),
    ),
    (
        "Slice",
        one_node(
            "Slice",
            [("x", F, [2, 3, 4])],
            [("y", F, None)],
            [c("st", [0, -1]), c("en", [2, -100]), c("ax", [0, 2]), c("sp", [1, -2])],
        ),
    ),
    (
        "Slice-clamp",
        one_node("Slice", [("x", F, [2, 3, 4])], [("y", F, None)], [c("st", [1]), c("en", [2**62]), c("ax", [-1])]),
    ),
    ("Gather", one_node("Gather", [("x", F, [2, 3, 4])], [("y", F, None)], [c("i", [[0, -1], [2, 1]])], axis=1)),
    ("Unsqueeze", one_node("Unsqueeze", [("x", F, [2, 3, 4])], [("y", F, None)], [c("a", [0, -1])])),
    (
        "Squeeze",
        g.make(
            [
                helper.make_node("Unsqueeze", ["x", "a"], ["u"]),
                helper.make_node("Squeeze", ["u", "b"], ["v"]),
                helper.make_node("Squeeze", ["v"], ["y"]),
            ],
            [helper.make_tensor_value_info("x", F, [2, 3, 4])],
            [helper.make_tensor_value_info("y", F, None)],
            [c("a", [0, 2]), c("b", [2])],
            opset=13,
        ),
    ),
    ("Shape", one_node("Shape", [("x", F, [2, 3, 4])], [("y", I64, None)], start=1)),
    ("Size", one_node("Size", [("x", F, [2, 3, 4])], [("y", I64, None)])),
    ("Transpose", one_node("Transpose", [("x", F, [2, 3, 4])], [("y", F, None)], perm=[2, 0, 1])),
    ("Flatten", one_node("Flatten", [("x", F, [2, 3, 4])], [("y", F, None)], axis=-1)),
    ("Expand", one_node("Expand", [("x", F, [2, 3, 4])], [("y", F, None)], [c("s", [3, 1, 1, 1])])),
    ("Reshape", one_node("Reshape", [("x", F, [2, 3, 4])], [("y", F, None)], [c("s", [0, -1])])),
    ("Concat", one_node("Concat", [("x", F, [2, 3, 4])], [("y", F, None)], [g.init("k", X[:, :1])], axis=1)),
    (
        "ReduceMean-attr",
        one_node("ReduceMean", [("x", F, [2, 3, 4])], [("y", F, None)], opset=17, axes=[-1], keepdims=1),
    ),
    (
        "ReduceMean-input",
        one_node("ReduceMean", [("x", F, [2, 3, 4])], [("y", F, None)], [c("a", [0, 2])], opset=18, keepdims=0),
    ),
    ("ReduceSum", one_node("ReduceSum", [("x", F, [2, 3, 4])], [("y", F, None)], [c("a", [1])], opset=13)),
    ("Softmax-axis1", one_node("Softmax", [("x", F, [2, 3, 4])], [("y", F, None)], axis=1)),
    (
        "LayerNorm-axis",
        one_node(
            "LayerNormalization",
            [("x", F, [2, 3, 4])],
            [("y", F, None)],
            [g.init("w", X[0]), g.init("b", X[1])],
            axis=1,
        ),
    ),
    ("Gelu", one_node("Gelu", [("x", F, [2, 3, 4])], [("y", F, None)], opset=20)),
    ("Gelu-tanh", one_node("Gelu", [("x", F, [2, 3, 4])], [("y", F, None)], opset=20, approximate="tanh")),
    ("Pow", one_node("Pow", [("x", F, [2, 3, 4])], [("y", F, None)], [g.init("e", np.array(2.0, np.float32))])),
    ("Tanh", one_node("Tanh", [("x", F, [2, 3, 4])], [("y", F, None)])),
    ("Sigmoid", one_node("Sigmoid", [("x", F, [2, 3, 4])], [("y", F, None)])),
    (
        "Equal-Where",
        g.make(
            [helper.make_node("Greater", ["x", "z"], ["m"]), helper.make_node("Where", ["m", "x", "z"], ["y"])],
            [helper.make_tensor_value_info("x", F, [2, 3, 4])],
            [helper.make_tensor_value_info("y", F, None)],
            [g.init("z", np.zeros(4, np.float32))],
        ),
    ),
    (
        "GatherElements",
        one_node(
            "GatherElements",
            [("x", F, [2, 3, 4])],
            [("y", F, None)],
            [c("i", np.array([[[0, -1], [2, 1], [1, 1]]] * 2))],
            axis=2,
        ),
    ),
    ("Tile", one_node("Tile", [("x", F, [2, 3, 4])], [("y", F, None)], [c("r", [2, 1, 3])])),
    (
        "Pad",
        one_node(
            "Pad",
            [("x", F, [2, 3, 4])],
            [("y", F, None)],
            [c("p", [0, 1, 2, 1, 0, 3]), g.init("v", np.array(1.5, np.float32))],
        ),
    ),
    (
        "Pad-reflect",
        one_node("Pad", [("x", F, [2, 3, 4])], [("y", F, None)], [c("p", [0, 1, 2, 0, 1, 1])], mode="reflect"),
    ),
    ("ArgMax", one_node("ArgMax", [("x", F, [2, 3, 4])], [("y", I64, None)], axis=1, keepdims=0)),
    (
        "PRelu",
        one_node(
            "PRelu", [("x", F, [2, 3, 4])], [("y", F, None)], [g.init("s", np.array([0.1, 0.2, 0.3, 0.4], np.float32))]
        ),
    ),
    ("Elu", one_node("Elu", [("x", F, [2, 3, 4])], [("y", F, None)], alpha=0.7)),
    ("Selu", one_node("Selu", [("x", F, [2, 3, 4])], [("y", F, None)])),
    ("HardSigmoid", one_node("HardSigmoid", [("x", F, [2, 3, 4])], [("y", F, None)], alpha=0.3)),
    ("HardSwish", one_node("HardSwish", [("x", F, [2, 3, 4])], [("y", F, None)])),
    ("Softplus", one_node("Softplus", [("x", F, [2, 3, 4])], [("y", F, None)])),
    ("Softsign", one_node("Softsign", [("x", F, [2, 3, 4])], [("y", F, None)])),
    ("Mish", one_node("Mish", [("x", F, [2, 3, 4])], [("y", F, None)], opset=18)),
    ("Sign", one_node("Sign", [("x", F, [2, 3, 4])], [("y", F, None)])),
    ("Round", one_node("Round", [("x", F, [2, 3, 4])], [("y", F, None)])),
    ("IsNaN", one_node("IsNaN", [("x", F, [2, 3, 4])], [("y", TensorProto.BOOL, None)])),
    ("Mean", one_node("Mean", [("x", F, [2, 3, 4])], [("y", F, None)], [g.init("k", X[1])])),
    ("LogSoftmax", one_node("LogSoftmax", [("x", F, [2, 3, 4])], [("y", F, None)], axis=1)),
    ("ReduceProd", one_node("ReduceProd", [("x", F, [2, 3, 4])], [("y", F, None)], [c("a", [2])], opset=18)),
    ("ReduceL2", one_node("ReduceL2", [("x", F, [2, 3, 4])], [("y", F, None)], [c("a", [1])], opset=18, keepdims=0)),
    ("ReduceL1", one_node("ReduceL1", [("x", F, [2, 3, 4])], [("y", F, None)], opset=17, axes=[0])),
    ("ReduceSumSquare", one_node("ReduceSumSquare", [("x", F, [2, 3, 4])], [("y", F, None)], [c("a", [-1])], opset=18)),
    (
        "Einsum",
        one_node(
            "Einsum", [("x", F, [2, 3, 4])], [("y", F, None)], [g.init("k", X[0].T.copy())], equation="bij,jk->bik"
        ),
    ),
    ("Trilu", one_node("Trilu", [("x", F, [2, 3, 4])], [("y", F, None)], [c("k", 1)], upper=0)),
    ("TopK", one_node("TopK", [("x", F, [2, 3, 4])], [("v", F, None), ("i", I64, None)], [c("k", [2])], axis=-1)),
    (
        "InstanceNorm",
        one_node(
            "InstanceNormalization",
            [("x", F, [2, 3, 4])],
            [("y", F, None)],
            [g.init("s", X[0, :, 0]), g.init("b", X[1, :, 1])],
        ),
    ),
    ("CumSum", one_node("CumSum", [("x", F, [2, 3, 4])], [("y", F, None)], [c("a", 1)])),
    (
        "CumSum-excl-rev",
        one_node("CumSum", [("x", F, [2, 3, 4])], [("y", F, None)], [c("a", -1)], exclusive=1, reverse=1),
    ),
    (
        "NonZero",
        g.make(
            [helper.make_node("Greater", ["x", "z"], ["m"]), helper.make_node("NonZero", ["m"], ["y"])],
            [helper.make_tensor_value_info("x", F, [2, 3, 4])],
            [helper.make_tensor_value_info("y", I64, None)],
            [g.init("z", np.zeros(4, np.float32))],
        ),
    ),
    (
        "ScatterND",
        one_node(
            "ScatterND",
            [("x", F, [2, 3, 4])],
            [("y", F, None)],
            [c("i", [[0, 1], [1, 2]]), g.init("u", np.ones((2, 4), np.float32))],
        ),
    ),
    (
        "ScatterND-add",
        one_node(
            "ScatterND",
            [("x", F, [2, 3, 4])],
            [("y", F, None)],
            [c("i", [[1, 0, 3], [1, 0, 3]]), g.init("u", np.array([1.0, 2.0], np.float32))],
            opset=18,
            reduction="add",
        ),
    ),
    (
        "OneHot",
        g.make(
            [
                helper.make_node("ArgMax", ["x"], ["i"], axis=2, keepdims=0),
                helper.make_node("OneHot", ["i", "d", "v"], ["y"], axis=1),
            ],
            [helper.make_tensor_value_info("x", F, [2, 3, 4])],
            [helper.make_tensor_value_info("y", F, None)],
            [c("d", [5]), g.init("v", np.array([-1.0, 3.0], np.float32))],
        ),
    ),
    ("Cast", one_node("Cast", [("x", F, [2, 3, 4])], [("y", I64, None)], to=I64)),
    (
        "ConstantOfShape",
        g.make(
            [
                helper.make_node("Shape", ["x"], ["s"]),
                helper.make_node("ConstantOfShape", ["s"], ["y"], value=helper.make_tensor("v", I64, [1], [3])),
            ],
            [helper.make_tensor_value_info("x", F, [2, 3, 4])],
            [helper.make_tensor_value_info("y", I64, None)],
            [],
        ),
    ),
    (
        "Constant",
        g.make(
            [
                helper.make_node("Constant", [], ["k"], value=helper.make_tensor("v", F, [4], [1, 2, 3, 4])),
                helper.make_node("Sub", ["x", "k"], ["y"]),
            ],
            [helper.make_tensor_value_info("x", F, [2, 3, 4])],
            [helper.make_tensor_value_info("y", F, None)],
            [],
        ),
    ),
]
CASES4 = [
    ("MaxPool-pads", one_node("MaxPool", [("x", F, [1, 2, 7, 9])], [("y", F, None)], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])),
    ("MaxPool-ceil", one_node("MaxPool", [("x", F, [1, 2, 7, 9])], [("y", F, None)], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
    ("AveragePool", one_node("AveragePool", [("x", F, [1, 2, 7, 9])], [("y", F, None)], kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    ("AveragePool-incl", one_node("AveragePool", [("x", F, [1, 2, 7, 9])], [("y", F, None)], kernel_shape=[3, 2], pads=[1, 1, 1, 1], count_include_pad=1)),
    ("Conv-same", one_node("Conv", [("x", F, [1, 2, 7, 9])], [("y", F, None)], [g.init("w", RNG.standard_normal((4, 2, 3, 3)).astype(np.float32))], auto_pad="SAME_UPPER", strides=[2, 2])),
    ("Conv-depthwise", one_node("Conv", [("x", F, [1, 2, 7, 9])], [("y", F, None)], [g.init("w", RNG.standard_normal((2, 1, 3, 3)).astype(np.float32))], group=2)),
    ("Resize-nearest-scales", one_node("Resize", [("x", F, [1, 2, 7, 9])], [("y", F, None)], [g.init("roi", np.zeros(0, np.float32)), g.init("sc", np.array([1, 1, 2, 1.5], np.float32))])),
    ("Resize-nearest-asym-floor", one_node("Resize", [("x", F, [1, 2, 7, 9])], [("y", F, None)], [g.init("roi", np.zeros(0, np.float32)), g.init("sc", np.array([1, 1, 0.5, 2], np.float32))], coordinate_transformation_mode="asymmetric", nearest_mode="floor")),
    ("Resize-linear-sizes", one_node("Resize", [("x", F, [1, 2, 7, 9])], [("y", F, None)], [g.init("roi", np.zeros(0, np.float32)), g.init("sc", np.zeros(0, np.float32)), c("sz", [1, 2, 12, 5])], mode="linear")),
    ("Resize-linear-align", one_node("Resize", [("x", F, [1, 2, 7, 9])], [("y", F, None)], [g.init("roi", np.zeros(0, np.float32)), g.init("sc", np.array([1, 1, 2, 2], np.float32))], mode="linear", coordinate_transformation_mode="align_corners")),
    ("Resize-linear-pytorch", one_node("Resize", [("x", F, [1, 2, 7, 9])], [("y", F, None)], [g.init("roi", np.zeros(0, np.float32)), g.init("sc", np.array([1, 1, 0.6, 1.7], np.float32))], mode="linear", coordinate_transformation_mode="pytorch_half_pixel")),
    ("Resize-nearest-ceil-tf", one_node("Resize", [("x", F, [1, 2, 7, 9])], [("y", F, None)], [g.init("roi", np.zeros(0, np.float32)), g.init("sc", np.array([1, 1, 1.3, 0.7], np.float32))], coordinate_transformation_mode="tf_half_pixel_for_nn", nearest_mode="round_prefer_ceil")),
    ("Resize-linear-down", one_node("Resize", [("x", F, [1, 2, 7, 9])], [("y", F, None)], [g.init("roi", np.zeros(0, np.float32)), g.init("sc", np.array([1, 1, 0.5, 0.4], np.float32))], mode="linear")),
    ("ConvTranspose", one_node("ConvTranspose", [("x", F, [1, 2, 7, 9])], [("y", F, None)], [g.init("w", RNG.standard_normal((2, 3, 3, 3)).astype(np.float32)), g.init("b", RNG.standard_normal(3).astype(np.float32))])),
    ("ConvTranspose-strided", one_node("ConvTranspose", [("x", F, [1, 2, 7, 9])], [("y", F, None)], [g.init("w", RNG.standard_normal((2, 2, 3, 2)).astype(np.float32))], strides=[2, 3], pads=[1, 0, 0, 1], output_padding=[1, 2], dilations=[1, 2], group=2)),
    ("GlobalAveragePool", one_node("GlobalAveragePool", [("x", F, [1, 2, 7, 9])], [("y", F, None)])),
]  # fmt: skip


@pytest.mark.parametrize("model", [m for _, m in CASES], ids=[n for n, _ in CASES])
def test_op_matches_onnxruntime(model: onnx.ModelProto, tmp_path: pathlib.Path) -> None:
    assert_same(model, {"x": X}, tmp_path)


@pytest.mark.parametrize("model", [m for _, m in CASES4], ids=[n for n, _ in CASES4])
def test_spatial_op_matches_onnxruntime(model: onnx.ModelProto, tmp_path: pathlib.Path) -> None:
    assert_same(model, {"x": X4}, tmp_path)


def test_exported_tiny_bert_matches_onnxruntime(fixtures_dir: pathlib.Path) -> None:
    """A graph from torch's ONNX exporter (see tests/fixtures/onnx/make_tiny_bert.py), padded batches.

    Each shape runs twice with different data: the second run takes the cached shape-only values.
    """
    path = fixtures_dir / "onnx" / "tiny_bert.onnx"
    prog = OnnxProgram(read_onnx(path))
    assert len(prog.data_steps) < len(prog.steps) < len(onnx.load(str(path)).graph.node)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for B, T in [(3, 9), (1, 4), (3, 9), (1, 4)]:
        ids = rng.integers(0, 100, (B, T))
        mask = np.ones((B, T), np.int64)
        mask[-1, T // 2 :] = 0
        feeds = {"input_ids": ids, "attention_mask": mask}
        got = prog.run(feeds)
        want = sess.run(None, feeds)
        for name, w in zip(["last_hidden_state", "pooled"], want, strict=True):
            np.testing.assert_allclose(got[name], w, atol=1e-4, rtol=1e-4)


def test_exported_tiny_roberta_matches_onnxruntime(fixtures_dir: pathlib.Path) -> None:
    """RoBERTa's export (make_tiny_encoders.py) computes position ids with Not/Equal/CumSum over the ids."""
    path = fixtures_dir / "onnx" / "tiny_roberta.onnx"
    d = fixtures_dir / "embeddings" / "tiny_roberta"
    feeds = {"input_ids": np.load(d / "ids.npy"), "attention_mask": np.load(d / "mask.npy")}
    got = OnnxProgram(read_onnx(path)).run(feeds)["last_hidden_state"]
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(got, np.load(d / "hidden.npy"), atol=1e-4, rtol=1e-4)  # and transformers


def test_plan_survives_the_artifact(tmp_path: pathlib.Path, fixtures_dir: pathlib.Path) -> None:
    from modelc.artifact.reader import open_artifact
    from modelc.artifact.writer import write_artifact

    model = read_onnx(fixtures_dir / "onnx" / "tiny_bert.onnx")
    write_artifact(model, tmp_path / "b.modelc")
    art = open_artifact(tmp_path / "b.modelc")
    assert art.architecture == "onnx"
    feeds = {"input_ids": [[1, 2, 3]], "attention_mask": [[1, 1, 1]]}
    np.testing.assert_array_equal(OnnxProgram(art).run(feeds)["pooled"], OnnxProgram(model).run(feeds)["pooled"])


def test_float16_graph_matches_onnxruntime(tmp_path: pathlib.Path) -> None:
    """Half-precision weights and activations: products run in float32 BLAS, results are float16."""
    H = TensorProto.FLOAT16
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((16, 8)) * 0.3).astype(np.float16)
    b = rng.standard_normal(8).astype(np.float16)
    cw = (rng.standard_normal((4, 2, 3, 3)) * 0.3).astype(np.float16)
    n = helper.make_node
    model = g.make(
        [n("MatMul", ["x", "w"], ["m"]), n("Add", ["m", "b"], ["a"]), n("Relu", ["a"], ["y"]),
         n("Conv", ["img", "cw"], ["z"], pads=[1, 1, 1, 1])],
        [helper.make_tensor_value_info("x", H, ["N", 16]), helper.make_tensor_value_info("img", H, [1, 2, 5, 5])],
        [helper.make_tensor_value_info("y", H, ["N", 8]), helper.make_tensor_value_info("z", H, [1, 4, 5, 5])],
        [g.init("w", w), g.init("b", b), g.init("cw", cw)],
    )  # fmt: skip
    feeds = {
        "x": rng.standard_normal((3, 16)).astype(np.float16),
        "img": rng.standard_normal((1, 2, 5, 5)).astype(np.float16),
    }
    got, want = both(model, feeds, tmp_path)
    for a, e in zip(got, want, strict=True):
        assert a.dtype == np.float16
        np.testing.assert_allclose(a.astype(np.float32), e.astype(np.float32), atol=1e-2, rtol=1e-2)


@pytest.fixture
def block(tmp_path: pathlib.Path) -> OnnxProgram:
    return OnnxProgram(read_onnx(g.save(g.transformer_block(np.random.default_rng(0)), tmp_path / "b.onnx")))


def test_bad_inputs_are_invalid_requests(block: OnnxProgram) -> None:
    x = np.zeros((2, 3, 32), np.float32)
    mask = np.ones((2, 3), np.int64)
    with pytest.raises(InvalidRequestError, match="missing input 'mask'"):
        block.run({"x": x})
    with pytest.raises(InvalidRequestError, match="unknown input 'z'"):
        block.run({"x": x, "mask": mask, "z": 1})
    with pytest.raises(InvalidRequestError, match=r"must have shape \[B, T, 32\]"):
        block.run({"x": np.zeros((2, 3, 31), np.float32), "mask": mask})
    with pytest.raises(InvalidRequestError, match="must have shape"):
        block.run({"x": np.zeros((2, 32), np.float32), "mask": mask})
    with pytest.raises(InvalidRequestError, match="dimension 'T' is 3"):
        block.run({"x": x, "mask": np.ones((2, 4), np.int64)})
    bad = x.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(InvalidRequestError, match="NaN or infinity"):
        block.run({"x": bad, "mask": mask})
    with pytest.raises(InvalidRequestError, match="ragged"):
        block.run({"x": [[[0.0] * 32], [[0.0] * 32, [1.0]]], "mask": mask})
    with pytest.raises(InvalidRequestError, match="must hold integers"):
        block.run({"x": x, "mask": np.full((2, 3), 0.5)})


def test_nested_lists_are_accepted(block: OnnxProgram) -> None:
    x = np.random.default_rng(1).standard_normal((1, 2, 32)).astype(np.float32)
    got = block.run({"x": x.tolist(), "mask": [[1, 1]]})["y"]
    want = block.run({"x": x, "mask": np.ones((1, 2), np.int64)})["y"]
    np.testing.assert_array_equal(got, want)


def test_gather_out_of_range_is_invalid_request(tmp_path: pathlib.Path) -> None:
    model = one_node("Gather", [("i", I64, ["N"])], [("y", F, None)], [g.init("table", np.eye(4, dtype=np.float32))])
    # Gather(data=table, indices=i): reorder the node's inputs so the table comes first.
    model.graph.node[0].input[:] = ["table", "i"]
    prog = OnnxProgram(read_onnx(g.save(model, tmp_path / "g.onnx", check=False)))
    np.testing.assert_array_equal(prog.run({"i": [3, 0]})["y"], np.eye(4, dtype=np.float32)[[3, 0]])
    with pytest.raises(InvalidRequestError, match="Gather index out of range"):
        prog.run({"i": [4]})


def test_concurrent_runs_with_mixed_shapes(fixtures_dir: pathlib.Path) -> None:
    """Worker threads share one program (and its shape cache); each gets its own right answer."""
    from concurrent.futures import ThreadPoolExecutor

    prog = OnnxProgram(read_onnx(fixtures_dir / "onnx" / "tiny_bert.onnx"))
    rng = np.random.default_rng(3)
    feeds = []
    for i in range(24):
        B, T = 1 + i % 3, 2 + i % 5
        feeds.append({"input_ids": rng.integers(0, 100, (B, T)), "attention_mask": np.ones((B, T), np.int64)})
    want = [OnnxProgram(read_onnx(fixtures_dir / "onnx" / "tiny_bert.onnx")).run(f)["pooled"] for f in feeds]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda f: prog.run(f)["pooled"], feeds))
    for g_, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g_, w)


@pytest.mark.parametrize("kind", ["int8", "q8_0", "f16", "bf16"])
def test_pack_time_quantized_initializers(kind: str, tmp_path: pathlib.Path) -> None:
    """`modelc pack --quantize` may store weights as int8 + @scale, GGML blocks or f16/bf16: the
    program dequantizes them once, in the graph's own element type (F32 here)."""
    from modelc.artifact.quantize import quantize_tensor, should_quantize
    from modelc.ir import Model

    rng = np.random.default_rng(0)
    path = g.save(g.mlp(rng, sizes=(64, 64, 32)), tmp_path / "m.onnx")
    model = read_onnx(path)
    tensors = {}
    for n, t in model.tensors.items():
        tensors.update(quantize_tensor(n, t, kind) if should_quantize(n, t, kind) else {n: t})
    assert any(t.dtype.value != "F32" for n, t in tensors.items() if n.startswith("w"))
    qmodel = Model("q", "onnx", tensors, metadata=model.metadata)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    got = OnnxProgram(qmodel).run({"x": x})["y"]
    want = OnnxProgram(model).run({"x": x})["y"]
    assert got.dtype == np.float32
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 2e-2
