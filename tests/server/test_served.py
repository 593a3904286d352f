"""The serving contract (server/served.py): every engine kind the server serves is a ServedModel,
answers the capability protocol of each thing it says it serves, and is refused with a 400 naming
the route it does serve otherwise."""

from __future__ import annotations

import pytest

from modelc.api.engines import EncoderEngine, InferEngine
from modelc.api.opener import open_engine
from modelc.config import CacheConfig, EngineConfig, ReplicaConfig
from modelc.errors import InvalidRequestError, UnsupportedError
from modelc.replicas.engine import ReplicaEngine
from modelc.server.manager.loaded import LoadedModel, ModelView
from modelc.server.served import (
    CAPABILITIES,
    EMBED,
    GENERATE,
    INFER,
    PROTOCOLS,
    RERANK,
    ModelSource,
    ServedModel,
    ServedTemplate,
    ServedTokenizer,
    embedding,
    generating,
    inferring,
    reranking,
)
from tests.server.fake_engine import FakeEngine
from tests.server.test_engines import mlp_model
from tests.server.tiny_model import make_served_model

pytestmark = pytest.mark.anyio


def check_contract(engine: object, serves: set[str]) -> None:
    assert isinstance(engine, ServedModel)
    assert engine.serves == serves and engine.serves <= set(CAPABILITIES)
    for cap in CAPABILITIES:
        assert isinstance(engine, PROTOCOLS[cap]) or cap not in serves, cap
    assert isinstance(engine.name, str) and isinstance(engine.architecture, str)
    assert isinstance(engine.stats(), dict)
    assert engine.context_length is None or engine.context_length > 0
    assert engine.source is None or isinstance(engine.source, ModelSource)
    if engine.source is not None:  # the source facts the model list, /props and /api/show read
        assert isinstance(engine.source.num_params, int) and isinstance(engine.source.total_bytes, int)
        assert isinstance(engine.source.config, dict) and engine.source.tensors is not None
    assert engine.config is None or isinstance(engine.config, EngineConfig)
    assert (engine.config is not None) == (GENERATE in serves)  # a scheduler and a KV cache to configure
    assert isinstance(engine.adapters, list)
    assert engine.tokenizer is None or isinstance(engine.tokenizer, ServedTokenizer)
    assert engine.chat_template is None or isinstance(engine.chat_template, ServedTemplate)
    if engine.tokenizer is not None:  # what logprobs, FIM, prompt budgets and token-id bounds read
        assert isinstance(engine.tokenizer.vocab_size, int) and engine.tokenizer.vocab_size > 0
        ids = engine.tokenizer.encode("hi", add_special=False)
        assert isinstance(engine.tokenizer.token_bytes(ids[0]), bytes)
        assert len(engine.tokenizer.all_token_bytes()) == engine.tokenizer.vocab_size
        assert engine.tokenizer.token_to_id("surely-not-one-token-xyz") is None
    view = ModelView(loaded(engine), "asked-name")  # the daemon's view serves what its engine serves
    assert isinstance(view, ServedModel) and view.serves == serves and view.name == "asked-name"
    assert view.architecture == engine.architecture and view.tokenizer is engine.tokenizer
    assert view.source is engine.source and view.config is engine.config and view.adapters == engine.adapters
    for cap in serves:
        assert isinstance(view, PROTOCOLS[cap])


def loaded(engine: object) -> LoadedModel:
    entry = LoadedModel("key", "name", None, -1.0)
    entry.engine = engine
    return entry


async def test_async_engine_is_served_model() -> None:
    config = EngineConfig(cache=CacheConfig(kv_cache_tokens=1024), warmup=False)
    async with open_engine(make_served_model(), config) as engine:
        assert type(engine).__name__ == "AsyncEngine"
        check_contract(engine, {GENERATE, EMBED})
        assert engine.context_length == make_served_model().config["max_position_embeddings"]


def test_replica_engine_is_served_model() -> None:
    config = EngineConfig(replicas=ReplicaConfig(replicas=1))
    engine = ReplicaEngine(make_served_model(), config, ray=None, actors=[])  # no Ray needed to look at it
    check_contract(engine, {GENERATE, EMBED})


async def test_encoder_and_infer_engines_are_served_models() -> None:
    from tests.models.test_bert import tiny_bert

    async with open_engine(tiny_bert(), EngineConfig(warmup=False)) as engine:
        assert isinstance(engine, EncoderEngine)
        check_contract(engine, {EMBED})  # a plain encoder; a cross-encoder also serves RERANK
        with pytest.raises(UnsupportedError, match="takes no LoRA adapters"):
            await engine.load_adapter("a", "/nowhere.safetensors")
    async with open_engine(mlp_model()) as engine:
        assert isinstance(engine, InferEngine)
        check_contract(engine, {INFER})
        view = ModelView(loaded(engine), "mlp")
        assert await view.infer({"input": [1.0, 2.0]}) == {"output": [5.0]}


def test_the_test_fake_is_a_served_model() -> None:
    check_contract(FakeEngine(config=EngineConfig()), {GENERATE, EMBED})


def test_refusals_name_the_route_the_model_serves() -> None:
    class Mlp(FakeEngine):
        serves = frozenset({INFER})

    mlp = Mlp(name="m", architecture="mlp")
    with pytest.raises(InvalidRequestError, match="does not generate text; use /infer"):
        generating(mlp)
    with pytest.raises(InvalidRequestError, match="does not produce embeddings; use /infer"):
        embedding(mlp, "input")
    with pytest.raises(InvalidRequestError, match="cross-encoder") as e:
        reranking(mlp, "model")
    assert e.value.param == "model"
    llm = FakeEngine()
    with pytest.raises(InvalidRequestError, match="MLP or ONNX"):
        inferring(llm)
    assert generating(llm) is llm and embedding(llm) is llm
    assert RERANK not in llm.serves
