"""Small ONNX graphs built with onnx.helper for the interpreter tests (MLP, transformer block, CNN)."""

from __future__ import annotations

import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def save(model: onnx.ModelProto, path: pathlib.Path, check: bool = True) -> pathlib.Path:
    """Write `model`; `check=False` for graphs whose outputs are declared without a shape (the checker wants one)."""
    if check:
        onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def make(nodes, inputs, outputs, inits, opset: int = 17, name: str = "g") -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def init(name: str, arr: np.ndarray) -> TensorProto:
    return numpy_helper.from_array(np.asarray(arr), name)


def mlp(rng: np.random.Generator, sizes=(8, 16, 4), batch="N") -> onnx.ModelProto:
    nodes, inits = [], []
    prev = "x"
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        inits += [
            init(f"w{i}", rng.standard_normal((a, b)).astype(np.float32)),
            init(f"b{i}", rng.standard_normal(b).astype(np.float32)),
        ]
        last = i == len(sizes) - 2
        out = "y" if last else f"h{i}"
        if i % 2 == 0:
            nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]))
            nodes.append(helper.make_node("Add", [f"m{i}", f"b{i}"], [out if last else f"a{i}"]))
        else:
            nodes.append(
                helper.make_node("Gemm", [prev, f"w{i}", f"b{i}"], [out if last else f"a{i}"], alpha=0.5, beta=2.0)
            )
        if not last:
            nodes.append(helper.make_node("Relu", [f"a{i}"], [out]))
        prev = out
    x = helper.make_tensor_value_info("x", F, [batch, sizes[0]])
    y = helper.make_tensor_value_info("y", F, [batch, sizes[-1]])
    return make(nodes, [x], [y], inits)


def transformer_block(
    rng: np.random.Generator, C: int = 32, H: int = 4, F_: int = 64, opset: int = 17
) -> onnx.ModelProto:
    """Pre-LN block: LN -> QKV -> attention with an additive mask -> proj -> residual -> LN -> FFN (erf GELU)."""
    D = C // H
    r = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)  # noqa: E731
    inits = [init("ln1_w", 1 + r(C)), init("ln1_b", r(C)), init("wq", r(C, C)), init("wk", r(C, C)), init("wv", r(C, C)),
             init("wo", r(C, C)), init("ln2_w", 1 + r(C)), init("ln2_b", r(C)), init("w1", r(C, F_)), init("b1", r(F_)),
             init("w2", r(F_, C)), init("b2", r(C)), init("heads", np.array([0, 0, H, D], np.int64)),
             init("merge", np.array([0, 0, C], np.int64)), init("scale", np.array(1 / np.sqrt(D), np.float32)),
             init("sqrt2", np.array(np.sqrt(2), np.float32)), init("one", np.array(1, np.float32)),
             init("half", np.array(0.5, np.float32)), init("neg", np.array(-1e4, np.float32)),
             init("ax12", np.array([1, 2], np.int64))]  # fmt: skip
    n = helper.make_node
    nodes = [
        n("LayerNormalization", ["x", "ln1_w", "ln1_b"], ["h"], epsilon=1e-5),
        n("MatMul", ["h", "wq"], ["q0"]), n("MatMul", ["h", "wk"], ["k0"]), n("MatMul", ["h", "wv"], ["v0"]),
        n("Reshape", ["q0", "heads"], ["q1"]), n("Reshape", ["k0", "heads"], ["k1"]), n("Reshape", ["v0", "heads"], ["v1"]),
        n("Transpose", ["q1"], ["q"], perm=[0, 2, 1, 3]), n("Transpose", ["k1"], ["kt"], perm=[0, 2, 3, 1]),
        n("Transpose", ["v1"], ["v"], perm=[0, 2, 1, 3]),
        n("MatMul", ["q", "kt"], ["s0"]), n("Mul", ["s0", "scale"], ["s1"]),
        # mask (B, T) of 1/0 -> additive (B, 1, 1, T)
        n("Cast", ["mask"], ["mf"], to=F), n("Sub", ["one", "mf"], ["inv"]), n("Mul", ["inv", "neg"], ["madd0"]),
        n("Unsqueeze", ["madd0", "ax12"], ["madd"]), n("Add", ["s1", "madd"], ["s2"]),
        n("Softmax", ["s2"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["o0"]),
        n("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]), n("Reshape", ["o1", "merge"], ["o2"]),
        n("MatMul", ["o2", "wo"], ["o3"]), n("Add", ["x", "o3"], ["r1"]),
        n("LayerNormalization", ["r1", "ln2_w", "ln2_b"], ["h2"], epsilon=1e-5),
        n("MatMul", ["h2", "w1"], ["f0"]), n("Add", ["f0", "b1"], ["f1"]),
        n("Div", ["f1", "sqrt2"], ["g0"]), n("Erf", ["g0"], ["g1"]), n("Add", ["g1", "one"], ["g2"]),
        n("Mul", ["f1", "g2"], ["g3"]), n("Mul", ["g3", "half"], ["g4"]),
        n("MatMul", ["g4", "w2"], ["f2"]), n("Add", ["f2", "b2"], ["f3"]), n("Add", ["r1", "f3"], ["y"]),
    ]  # fmt: skip
    x = helper.make_tensor_value_info("x", F, ["B", "T", C])
    mask = helper.make_tensor_value_info("mask", TensorProto.INT64, ["B", "T"])
    y = helper.make_tensor_value_info("y", F, ["B", "T", C])
    return make(nodes, [x, mask], [y], inits, opset=opset)


def cnn(rng: np.random.Generator) -> onnx.ModelProto:
    r = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)  # noqa: E731
    inits = [init("c1w", r(8, 3, 3, 3)), init("c1b", r(8)), init("bn_s", 1 + r(8)), init("bn_b", r(8)),
             init("bn_m", r(8)), init("bn_v", np.abs(r(8)) + 0.5), init("c2w", r(8, 2, 3, 3)), init("c2b", r(8)),
             init("c3w", r(16, 8, 1, 1)), init("fcw", r(16, 10)), init("fcb", r(10))]  # fmt: skip
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "c1w", "c1b"], ["a"], pads=[1, 1, 1, 1], strides=[1, 1]),
        n("BatchNormalization", ["a", "bn_s", "bn_b", "bn_m", "bn_v"], ["b"], epsilon=1e-5),
        n("Relu", ["b"], ["c"]),
        n("MaxPool", ["c"], ["d"], kernel_shape=[2, 2], strides=[2, 2]),
        n("Conv", ["d", "c2w", "c2b"], ["e"], group=4, pads=[2, 2, 2, 2], dilations=[2, 2]),
        n("Conv", ["e", "c3w"], ["f"], strides=[2, 2]),
        n("Sigmoid", ["f"], ["g"]),
        n("GlobalAveragePool", ["g"], ["h"]),
        n("Flatten", ["h"], ["i"], axis=1),
        n("Gemm", ["i", "fcw", "fcb"], ["j"]),
        n("Softmax", ["j"], ["y"], axis=1),
    ]
    x = helper.make_tensor_value_info("x", F, ["N", 3, 12, 12])
    y = helper.make_tensor_value_info("y", F, ["N", 10])
    return make(nodes, [x], [y], inits, opset=17)
