from __future__ import annotations

import numpy as np
import pytest

from modelc.version import __version__
from tests.server.conftest import error_of
from tests.server.fake_engine import FakeEngine, InferEngine

pytestmark = pytest.mark.anyio
MSGS = [{"role": "user", "content": "hi"}]


async def test_health_info_props_system_version(client) -> None:
    assert await (await client.get("/health")).get_json() == {
        "status": "ok",
        "model": "fake-model",
        "architecture": "llama",
        "kernels": "ready",
    }
    info = await (await client.get("/info")).get_json()
    assert set(info) == {"name", "architecture", "total_params", "total_bytes", "tensors"}
    props = await (await client.get("/props")).get_json()
    assert props["model"] == "fake-model" and props["chat_template"].startswith("{% for")
    assert props["default_generation"]["temperature"] == 0.0 and props["default_generation"]["max_tokens"] == 128
    sysinfo = await (await client.get("/v1/system")).get_json()
    assert sysinfo["cpu_cores"] >= 1 and sysinfo["memory_total_bytes"] > 0
    ver = await (await client.get("/api/version")).get_json()
    assert ver["version"] == __version__ and ver["git_sha"]


async def test_info_counts_tensors() -> None:
    from modelc.ir import Model, TensorData
    from modelc.server.app import create_app
    from modelc.server.state import ServerState

    eng = FakeEngine()
    eng.source = Model("m", "llama", {"a": TensorData.from_array(np.zeros((2, 3), np.float32))})
    info = await (await create_app(ServerState(eng)).test_client().get("/info")).get_json()
    assert (info["total_params"], info["total_bytes"], info["tensors"]) == (6, 24, ["a"])


async def test_native_chat_greedy_by_default(client) -> None:
    body = await (await client.post("/chat", {"messages": MSGS, "max_tokens": 3, "top_p": 0.0})).get_json()
    assert body["message"]["role"] == "assistant" and len(body["message"]["content"]) == 3
    p = client.engine.calls[0][1]
    assert p.temperature == 0.0 and p.top_p == 1.0  # seed spec: top_p 0 = off


async def test_native_chat_stream(client) -> None:
    resp, events = await client.sse("/chat/stream", {"messages": MSGS, "max_tokens": 3})
    assert resp.status_code == 200
    assert [e["done"] for e in events] == [False, False, False, True]
    assert len("".join(e["delta"] for e in events)) == 3


async def test_complete(client) -> None:
    client.engine.reply = "done!"
    assert await (await client.post("/complete", {"prompt": "x"})).get_json() == {"completion": "done!"}
    await error_of(await client.post("/complete", {"prompt": 3}), 400, "prompt")


async def test_native_grammar_param_reaches_engine(make_client, monkeypatch) -> None:
    import modelc.server.native_routes as native

    monkeypatch.setattr(native, "precompile", lambda engine, c: None)  # the byte tokenizer has no grammar engine
    c = make_client()
    await c.post("/complete", {"prompt": "x", "grammar": "[0-9]+", "max_tokens": 2})
    assert c.engine.calls[0][1].constraint.kind == "regex" and c.engine.calls[0][1].constraint.source == "[0-9]+"


async def test_embeddings_single_and_batch(client) -> None:
    one = await (await client.post("/embeddings", {"input": "a"})).get_json()
    assert len(one["embedding"]) == 8 and one["model"] == "fake-model"
    many = await (await client.post("/embeddings", {"inputs": ["a", "b"]})).get_json()
    assert [e["index"] for e in many["embeddings"]] == [0, 1]
    np.testing.assert_allclose(many["embeddings"][0]["embedding"], one["embedding"], rtol=1e-6)
    await error_of(await client.post("/embeddings", {"inputs": []}), 400, "inputs")


async def test_tokenize_detokenize(client) -> None:
    t = await (await client.post("/tokenize", {"input": "hé"})).get_json()
    assert t == {"tokens": client.engine.tokenizer.encode("hé"), "count": 4}
    tb = await (await client.post("/tokenize", {"inputs": ["a", "bc"], "add_special": False})).get_json()
    assert tb["count"] == 3 and len(tb["tokens_batch"]) == 2
    d = await (await client.post("/detokenize", {"tokens": t["tokens"]})).get_json()
    assert d == {"text": "hé", "content": "hé"}  # the seed's field and llama.cpp's
    await error_of(await client.post("/detokenize", {"tokens": [10**6]}), 400, "tokens")
    await error_of(await client.post("/detokenize", {"tokens": "abc"}), 400, "tokens")


async def test_infer(make_client) -> None:
    c = make_client(InferEngine(architecture="mlp"))
    assert await (await c.post("/infer", {"input": [1.0, 2.0]})).get_json() == {"output": [2.0, 4.0]}
    assert await (await c.post("/infer", {"inputs": [[1.0], [3.0]]})).get_json() == {"outputs": [[2.0], [6.0]]}
    await error_of(await c.post("/infer", {"x": 1}), 400, "input")


async def test_infer_on_llm_is_400(client) -> None:
    err = await error_of(await client.post("/infer", {"input": [1.0]}), 400)
    assert "MLP or ONNX" in err["message"]


async def test_lora_load_unload(make_client, tmp_path) -> None:
    (tmp_path / "ad.safetensors").write_bytes(b"")  # the fake engine does not read it
    client = make_client(control_token="tok", adapters_dir=str(tmp_path))
    auth = {"headers": {"Authorization": "Bearer tok"}}
    body = await (await client.post("/lora/load", {"path": "ad.safetensors", "alpha": 0.5}, **auth)).get_json()
    where = str((tmp_path / "ad.safetensors").resolve())
    assert body["name"] == "ad" and body["applied"] == 4 and client.engine.loaded_adapters == {"ad": (where, 0.5)}
    assert where not in body["message"]  # the server's path stays on the server
    assert (await client.post("/lora/unload", **auth)).status_code == 200
    assert client.engine.loaded_adapters == {}
    await error_of(await client.post("/lora/unload", {"name": "ad"}, **auth), 404)
    await error_of(await client.post("/lora/load", {}, **auth), 400, "path")
    await error_of(await client.post("/lora/load", {"path": "ad.safetensors"}), 403)  # a control route


async def test_metrics_and_log_lines(client) -> None:
    await client.post("/v1/chat/completions", {"messages": MSGS, "max_tokens": 3})
    await client.post("/v1/chat/completions", {"messages": MSGS, "max_tokens": 2, "stream": True})
    await client.post("/v1/chat/completions", {"messages": []})
    text = (await (await client.get("/metrics")).get_data()).decode()
    assert 'modelc_requests_total{route="/v1/chat/completions",status="200"} 2.0' in text
    assert 'modelc_requests_total{route="/v1/chat/completions",status="400"} 1.0' in text
    assert "modelc_tokens_generated_total 5.0" in text
    assert 'modelc_inference_duration_seconds_bucket{le="0.01"}' in text
    assert 'modelc_inference_duration_seconds_bucket{le="5.0"}' in text
    assert "modelc_active_requests 0.0" in text
    for name in (
        "modelc_time_to_first_token_seconds_count 2.0",
        "modelc_inter_token_latency_seconds_count 3.0",
        "modelc_kv_blocks_total 64.0",
        "modelc_prefix_cache_hits_total 4.0",
        "modelc_num_requests_running",
        "modelc_num_preemptions_total 0.0",
        "modelc_request_prompt_tokens_count 2.0",
        "modelc_request_queue_time_seconds_count 2.0",
        "modelc_hugepages_moved_bytes",
        "modelc_hugepages_moving",
        "modelc_hugepages_move_failures_total",
    ):
        assert name in text, name
    lines = client.log_lines()
    chat = [ln for ln in lines if ln["path"] == "/v1/chat/completions"]
    assert [ln["status"] for ln in chat] == [200, 200, 400]
    assert chat[0]["completion_tokens"] == 3 and chat[1]["stream"] and chat[1]["completion_tokens"] == 2
    assert chat[0]["id"].startswith("chatcmpl-") and chat[0]["ttft_ms"] is not None and chat[2]["error"]


async def test_the_context_is_reported_in_props_models_and_ps(make_client) -> None:
    """run --ctx-size (the engine's max_model_len) shows in /props (llama.cpp's n_ctx), /v1/models and /api/ps."""
    from modelc.config import EngineConfig, SchedulerConfig
    from tests.server.fake_engine import FakeEngine

    engine = FakeEngine()
    engine.config = EngineConfig(scheduler=SchedulerConfig(max_model_len=1234))
    c = make_client(engine)
    assert (await (await c.get("/props")).get_json())["n_ctx"] == 1234
    card = (await (await c.get("/v1/models")).get_json())["data"][0]
    assert card["id"] == "fake-model" and card["context_length"] == 1234
    assert (await (await c.get("/api/ps")).get_json())["models"][0]["context_length"] == 1234


async def test_props_say_where_the_weights_live(make_client) -> None:
    """/props' "weights": the plan recorded for the served source (models/residency.py), else the config's mode."""
    from modelc.config import EngineConfig
    from modelc.ir import Model, TensorData
    from modelc.models import residency
    from tests.server.fake_engine import FakeEngine

    engine = FakeEngine()
    engine.config = EngineConfig()
    engine.source = Model("m", "llama", {"blk.0.attn_q.weight": TensorData.from_array(np.zeros((4, 8), np.float32))})
    c = make_client(engine)
    assert (await (await c.get("/props")).get_json())["weights"] == {"mode": "auto"}
    residency.assign(engine.source, residency.decide(engine.source, "streamed", available_bytes=1 << 30))
    weights = (await (await c.get("/props")).get_json())["weights"]
    assert weights["mode"] == "streamed" and weights["budget_bytes"] == 128 and "asked for" in weights["reason"]
