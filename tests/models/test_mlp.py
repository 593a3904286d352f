from __future__ import annotations

import numpy as np
import pytest

from modelc.errors import FormatError, InvalidRequestError
from modelc.ir import Model, TensorData
from modelc.kernels.matmul import linear, plan
from modelc.kernels.matmul.linear import dequantize
from modelc.models.mlp import MlpModel, layer_names


def mlp_model(names: list[str], sizes=(6, 10, 7, 3), bias=True, seed=0) -> Model:
    rng = np.random.default_rng(seed)
    t = {}
    for name, (a, b) in zip(names, zip(sizes[:-1], sizes[1:], strict=True), strict=True):
        t[f"{name}.weight"] = TensorData.from_array(rng.standard_normal((b, a)).astype(np.float32))
        if bias:
            t[f"{name}.bias"] = TensorData.from_array(rng.standard_normal(b).astype(np.float32))
    return Model("m", "mlp", t)


def reference(model: Model, names: list[str], x: np.ndarray) -> np.ndarray:
    h = x.astype(np.float64)
    for i, n in enumerate(names):
        h = h @ model.tensors[f"{n}.weight"].array().T
        if f"{n}.bias" in model.tensors:
            h = h + model.tensors[f"{n}.bias"].array()
        if i < len(names) - 1:
            h = np.maximum(h, 0)
    return h


@pytest.mark.parametrize(
    "names",
    [
        ["layer0", "layer1", "layer2"],
        ["layers.0", "layers.1", "layers.2"],
        ["net.0", "net.2", "net.10"],
        ["fc1", "fc2", "fc3"],
    ],
)
@pytest.mark.parametrize("B", [1, 4, 300])  # 300 > SMALL_T: the x @ W.T path
def test_forward_matches_reference(names: list[str], B: int) -> None:
    model = mlp_model(names)
    x = np.random.default_rng(B).standard_normal((B, 6)).astype(np.float32)
    np.testing.assert_allclose(MlpModel(model).forward(x), reference(model, names, x), rtol=1e-5, atol=1e-5)


def test_layer_order_is_numeric() -> None:
    model = mlp_model(["net.2", "net.10", "net.0"], sizes=(6, 10, 7, 3))
    assert [w for w, _ in layer_names(model.tensors)] == ["net.0.weight", "net.2.weight", "net.10.weight"]


def test_single_weight_and_no_bias() -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 5)).astype(np.float32)
    model = Model("m", "mlp", {"weight": TensorData.from_array(w)})
    x = rng.standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_allclose(MlpModel(model).forward(x), x @ w.T, rtol=1e-5, atol=1e-6)


def test_batch_is_one_gemm_per_layer() -> None:
    mlp = MlpModel(mlp_model(["layer0", "layer1", "layer2"]))
    seen = []

    class Spy:
        def __init__(self, inner):
            self.inner = inner

        def __call__(self, h):
            seen.append(h.shape)
            return self.inner(h)

    mlp.layers = [Spy(layer) for layer in mlp.layers]
    mlp.forward(np.zeros((16, 6), np.float32))
    assert seen == [(16, 6), (16, 10), (16, 7)]


@pytest.mark.parametrize("kind", ["int8", "q8_0", "f16"])
def test_quantized_weights(kind: str) -> None:
    from modelc.artifact.quantize import quantize_tensor

    names = ["layer0", "layer1", "layer2"]
    model = mlp_model(names, sizes=(32, 64, 32, 3))
    qt = {}
    for n, t in model.tensors.items():
        qt.update(quantize_tensor(n, t, kind) if n.endswith("weight") else {n: t})
    qmodel = Model("q", "mlp", qt)
    deq = Model("d", "mlp", {
        n: TensorData.from_array(dequantize(t, qt.get(n + "@scale")).reshape(t.shape).astype(np.float32)) if n.endswith("weight") else t
        for n, t in qt.items() if not n.endswith("@scale")
    })  # fmt: skip
    x = np.random.default_rng(0).standard_normal((5, 32)).astype(np.float32)
    got, want = MlpModel(qmodel).forward(x), reference(deq, names, x)
    # Few rows: the quantized kernels quantize activations to int8 blocks too (llama.cpp's scheme, ~5e-3 each).
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 2e-2
    many = MlpModel(qmodel).forward(np.tile(x, (8, 1)))[:5]  # 40 rows: the prefill path
    if (
        plan.plan_matmul(linear.prepare_weight(qt["layer0.weight"], qt.get("layer0.weight@scale")), 40)
        is plan.Path.BLAS
    ):
        np.testing.assert_allclose(many, want, rtol=1e-3, atol=1e-3)  # dequantize + BLAS: fp32
    else:  # Q4_0 / Q8_0 / Q4_K on AMX tiles keep int8 activations: the few-row numbers, other kernel
        np.testing.assert_allclose(many, got, rtol=1e-4, atol=1e-4)


def test_bad_models_and_inputs() -> None:
    with pytest.raises(FormatError, match="needs layerN.weight"):
        MlpModel(Model("m", "mlp", {"foo": TensorData.from_array(np.zeros(3, np.float32))}))
    bad = mlp_model(["layer0", "layer1", "layer2"])
    bad.tensors["layer1.weight"] = TensorData.from_array(np.zeros((7, 9), np.float32))
    with pytest.raises(FormatError, match="previous layer gives 10"):
        MlpModel(bad)
    mlp = MlpModel(mlp_model(["layer0", "layer1", "layer2"]))
    with pytest.raises(InvalidRequestError, match="6 features"):
        mlp.forward(np.zeros((2, 5), np.float32))
