"""Serving non-LLM models through the same app: MLP/ONNX via /infer, BERT encoders via embeddings."""

from __future__ import annotations

import numpy as np
import pytest

from modelc.api.opener import open_engine
from modelc.ir import Model, TensorData
from modelc.server.app import create_app
from modelc.server.state import ServerState
from tests.server.conftest import error_of

pytestmark = pytest.mark.anyio


def mlp_model() -> Model:
    w0 = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]], np.float32)  # (3, 2)
    b0 = np.array([0.0, 0.0, -10.0], np.float32)
    w1 = np.array([[1.0, 1.0, 1.0]], np.float32)  # (1, 3)
    t = {"layer0.weight": w0, "layer0.bias": b0, "layer1.weight": w1, "layer1.bias": np.zeros(1, np.float32)}
    return Model("mlp-test", "mlp", {k: TensorData.from_array(v) for k, v in t.items()})


async def test_mlp_infer_through_open_engine() -> None:
    async with open_engine(mlp_model()) as engine:
        c = create_app(ServerState(engine)).test_client()
        r = await c.post("/infer", json={"input": [1.0, 2.0]})
        assert (await r.get_json()) == {"output": [5.0]}  # relu([1, 4, -7]) summed
        r = await c.post("/infer", json={"inputs": [[1.0, 2.0], [0.0, 1.0]]})
        assert (await r.get_json()) == {"outputs": [[5.0], [2.0]]}
        err = await error_of(
            await c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}), 400
        )
        assert "/infer" in err["message"]
        await error_of(await c.post("/tokenize", json={"input": "x"}), 400)
        assert (await (await c.get("/health")).get_json())["architecture"] == "mlp"
        info = await (await c.get("/info")).get_json()
        assert info["total_params"] == 13 and "layer0.weight" in info["tensors"]


async def test_bert_embeddings_through_open_engine() -> None:
    from tests.models.test_bert import tiny_bert

    async with open_engine(tiny_bert()) as engine:
        c = create_app(ServerState(engine)).test_client()
        r = await c.post("/v1/embeddings", json={"input": [[1, 2, 3], [4, 5]]})
        body = await r.get_json()
        assert r.status_code == 200 and len(body["data"]) == 2
        v = np.array(body["data"][0]["embedding"])
        direct = await engine.embed([[1, 2, 3]])
        np.testing.assert_allclose(v, direct[0], rtol=1e-5)
        assert body["usage"]["prompt_tokens"] == 5
        await error_of(await c.post("/v1/embeddings", json={"input": "text"}), 400, "input")  # no tokenizer
        await error_of(await c.post("/v1/completions", json={"prompt": "x"}), 400)


def test_infer_warmup_is_best_effort(monkeypatch) -> None:
    """A graph that rejects the warmup's zeros still loads (its first request compiles, as before)."""
    from modelc.api.engines import InferEngine

    engine = InferEngine(mlp_model())
    engine.warmup()  # runs
    calls = []

    def reject(x):
        calls.append(x.shape)
        raise ValueError("values used as a shape")

    monkeypatch.setattr(engine._inferencer.mlp, "forward", reject)
    engine.warmup()  # no error
    assert calls == [(1, 2)]
