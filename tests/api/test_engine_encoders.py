"""Engine.embed / Engine.infer on encoder and MLP models: delegated to Embedder / Inferencer."""

from __future__ import annotations

import numpy as np
import pytest

from modelc.api.engine import Engine
from modelc.engine.infer import Inferencer
from modelc.errors import UnsupportedError
from modelc.ir import Model, TensorData


def mlp_model() -> Model:
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((8, 4)).astype(np.float32)
    b0 = rng.standard_normal(8).astype(np.float32)
    w1 = rng.standard_normal((3, 8)).astype(np.float32)
    b1 = rng.standard_normal(3).astype(np.float32)
    tensors = {
        n: TensorData.from_array(a)
        for n, a in {"layer0.weight": w0, "layer0.bias": b0, "layer1.weight": w1, "layer1.bias": b1}.items()
    }
    return Model(name="mlp", architecture="mlp", tensors=tensors)


def test_engine_infer_on_mlp_matches_numpy_and_refuses_generation():
    model = mlp_model()
    eng = Engine(model)
    x = [0.5, -1.0, 2.0, 0.25]
    w0, b0 = model.tensors["layer0.weight"].array(), model.tensors["layer0.bias"].array()
    w1, b1 = model.tensors["layer1.weight"].array(), model.tensors["layer1.bias"].array()
    want = np.maximum(np.asarray(x) @ w0.T + b0, 0) @ w1.T + b1
    got = eng.infer({"input": x})["output"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert eng.infer(x) == Inferencer(model).infer({"input": x})
    with pytest.raises(UnsupportedError, match="does not generate text"):
        eng.generate([1, 2, 3])


def test_engine_embed_on_bert_uses_the_encoder():
    from tests.models.test_bert import tiny_bert  # noqa: PLC0415 - H8's tiny BERT builder

    model = tiny_bert()
    eng = Engine(model)
    vecs = eng.embed([[2, 5, 7, 3], [2, 9, 3]])
    assert vecs.shape[0] == 2 and np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    with pytest.raises(UnsupportedError):
        eng.infer({"input": [1.0]})
