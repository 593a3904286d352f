"""Malformed and abusive requests are 4xx in the API's own error shape; limits that can never be met
are 400; rejections carry Retry-After and are counted; the drain ends streams with an error event."""

from __future__ import annotations

import asyncio
import json

import pytest

from modelc.config import EngineConfig, SchedulerConfig
from modelc.errors import ShuttingDownError
from modelc.server.generation import interrupt_all
from tests.server.conftest import error_of
from tests.server.fake_engine import FakeEngine

pytestmark = pytest.mark.anyio
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def limited(context: int = 64, max_queue: int = 8) -> FakeEngine:
    """A FakeEngine with a context length and a queue size, as AsyncEngine.config has them."""
    engine = FakeEngine()
    engine.config = EngineConfig(scheduler=SchedulerConfig(max_model_len=context, max_queue=max_queue))
    return engine


async def raw(c, path: str, data: bytes):
    return await c.http.post(path, data=data, headers={"Content-Type": "application/json"})


@pytest.mark.parametrize("role", [["user"], {"a": 1}, 3, None])
async def test_role_of_the_wrong_type_is_400(client, role) -> None:
    body = {"messages": [{"role": role, "content": "hi"}]}
    await error_of(await client.post("/v1/chat/completions", body), 400, "messages[0].role")
    resp = await client.post("/api/chat", {"model": "fake-model", "stream": False, **body})
    assert resp.status_code == 400 and isinstance((await resp.get_json())["error"], str)


@pytest.mark.parametrize("path", ["/v1/completions", "/tokenize", "/v1/embeddings", "/v1/chat/completions"])
async def test_lone_surrogate_is_400(client, path) -> None:
    body = b'{"prompt": "a\\ud800", "input": "\\uDFFF", "messages": [{"role": "user", "content": "\\ud83d"}]}'
    err = await error_of(await raw(client, path, body), 400)
    assert "surrogate" in err["message"]
    ok = b'{"prompt": "\\ud83d\\ude00", "max_tokens": 2}'  # a proper pair is fine
    assert (await raw(client, "/v1/completions", ok)).status_code == 200


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/tokenize", "/v1/embeddings"])
async def test_deeply_nested_json_is_400(client, path) -> None:
    for depth in (1000, 100_000):
        body = b'{"messages": ' + b"[" * depth + b"]" * depth + b"}"
        err = await error_of(await raw(client, path, body), 400)
        assert "nested too deeply" in err["message"]
    resp = await raw(client, "/api/chat", b"[" * 1000 + b"]" * 1000)
    assert resp.status_code == 400 and "nested" in (await resp.get_json())["error"]


async def test_nan_and_infinity_are_not_json(client) -> None:
    for bad in (b"NaN", b"Infinity", b"-Infinity"):
        err = await error_of(await raw(client, "/v1/completions", b'{"prompt": "a", "temperature": ' + bad + b"}"), 400)
        assert "not valid JSON" in err["message"]
    resp = await raw(client, "/api/generate", b'{"model": "fake-model", "prompt": "hi", "keep_alive": NaN}')
    assert resp.status_code == 400


async def test_model_name_over_255_bytes_is_400_without_a_path(make_client) -> None:
    from modelc.server.manager.models import ModelManager

    c = make_client()
    c.state.models = ModelManager()
    for path, body in (("/v1/chat/completions", CHAT), ("/api/chat", {**CHAT, "stream": False})):
        resp = await c.post(path, {**body, "model": "é" * 200})
        text = (await resp.get_data()).decode()
        assert resp.status_code == 400 and "255 bytes" in text and "/" not in text.replace("\\/", "")


async def test_ollama_routes_answer_ollama_errors(client) -> None:
    for resp in (
        await client.post("/api/generate", {"model": "fake-model", "prompt": "hi", "options": {"num_predict": -5}}),
        await client.post("/api/chat", {"model": "nope", "messages": [{"role": "user", "content": "x"}]}),
        await raw(client, "/api/chat", b"{"),
        await client.get("/api/nothing"),
    ):
        body = await resp.get_json()
        assert 400 <= resp.status_code < 500 and set(body) == {"error"} and isinstance(body["error"], str), body
    ok = await client.post("/api/generate", {"model": "fake-model", "prompt": "hi", "stream": False})
    assert ok.status_code == 200
    for n in (-1, -2):
        opts = {"num_predict": n}
        resp = await client.post(
            "/api/generate", {"model": "fake-model", "prompt": "hi", "stream": False, "options": opts}
        )
        assert resp.status_code == 200


async def test_rate_limit_429_has_retry_after_and_is_counted(make_client) -> None:
    c = make_client(rate_limit_per_min=1)
    assert (await c.post("/v1/completions", {"prompt": "a", "max_tokens": 1})).status_code == 200
    resp = await c.post("/v1/completions", {"prompt": "a", "max_tokens": 1})
    await error_of(resp, 429)
    assert int(resp.headers["Retry-After"]) >= 1
    assert 'modelc_requests_rejected_total{reason="rate_limit"} 1.0' in c.state.metrics.exposition().decode()


async def test_queue_full_is_counted(make_client) -> None:
    c = make_client(FakeEngine(max_waiting=0))
    await error_of(await c.post("/v1/chat/completions", CHAT), 503)
    assert 'modelc_requests_rejected_total{reason="queue_full"} 1.0' in c.state.metrics.exposition().decode()


async def test_models_by_every_name_generation_accepts(client) -> None:
    assert (await client.get("/v1/models/fake-model:latest")).status_code == 200
    assert (await client.get("/v1/models/fake-model")).status_code == 200
    await error_of(await client.get("/v1/models/other:latest"), 404)


async def test_more_prompts_than_the_queue_holds_is_400(make_client) -> None:
    c = make_client(limited(max_queue=8))
    err = await error_of(await c.post("/v1/completions", {"prompt": ["a"] * 9, "max_tokens": 1}), 400)
    assert "at most 8" in err["message"]
    assert (await c.post("/v1/completions", {"prompt": ["a"] * 8, "max_tokens": 1})).status_code == 200


async def test_every_route_enforces_the_context_length(make_client) -> None:
    c = make_client(limited(context=64))
    long_text = "x" * 100
    huge = "y" * 5_000_000  # refused by its length alone, before any tokenizer runs
    for text in (long_text, huge):
        await error_of(await c.post("/v1/completions", {"prompt": text, "max_tokens": 1}), 400, "prompt")
        msgs = [{"role": "user", "content": text}]
        await error_of(await c.post("/v1/chat/completions", {"messages": msgs}), 400, "messages")
        await error_of(await c.post("/v1/embeddings", {"input": text}), 400, "input")
        await error_of(await c.post("/tokenize", {"input": text}), 400, "input")
        resp = await c.post("/api/embed", {"model": "fake-model", "input": text, "truncate": False})
        assert resp.status_code == 400 and "context length is 64" in (await resp.get_json())["error"]
    await error_of(await c.post("/v1/completions", {"prompt": list(range(65)), "max_tokens": 1}), 400, "prompt")
    # truncate (OpenAI-style opt-in, Ollama's default) cuts each input to the context instead
    for text in (long_text, huge):
        body = await (await c.post("/v1/embeddings", {"input": [text, "ab"], "truncate": True})).get_json()
        num_ab = len(c.engine.tokenizer.encode("ab"))
        assert body["usage"]["prompt_tokens"] == 64 + num_ab and len(body["data"]) == 2
        resp = await c.post("/api/embed", {"model": "fake-model", "input": text})
        assert resp.status_code == 200 and (await resp.get_json())["prompt_eval_count"] == 64


async def test_embeddings_run_in_bounded_batches(make_client) -> None:
    from modelc.server import embedding

    engine = limited(context=4096)
    sizes: list[int] = []
    real = engine.embed

    async def spy(lists):
        sizes.append(sum(len(t) for t in lists))
        return await real(lists)

    engine.embed = spy
    c = make_client(engine)
    body = await (await c.post("/v1/embeddings", {"input": ["z" * 1000] * 10})).get_json()
    assert len(body["data"]) == 10 and len(sizes) > 1 and max(sizes) <= embedding.BATCH_TOKENS


async def test_stop_strings_are_bounded(client) -> None:
    await error_of(await client.post("/v1/completions", {"prompt": "a", "stop": ["x" * 5000]}), 400, "stop")


async def test_drain_timeout_ends_streams_with_an_error_event(make_client) -> None:
    c = make_client(FakeEngine(delay_s=0.02))
    task = asyncio.create_task(c.sse("/v1/chat/completions", {**CHAT, "max_tokens": 10_000, "stream": True}))
    while c.engine.num_active == 0:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.5)  # let the first tokens stream (an interrupt before them is a plain 503)
    assert interrupt_all(ShuttingDownError("the server is shutting down")) >= 1
    resp, events = await asyncio.wait_for(task, 60)
    assert events[-2]["error"]["code"] == "shutting_down" and events[-1] == "[DONE]"
    assert c.engine.num_active == 0 and c.state.num_in_flight == 0
    line = [r for r in c.log_lines() if r.get("stream")][-1]
    assert line["status"] == 503


async def test_unknown_json_structure_errors_stay_4xx(client) -> None:
    for body in ([], "x", 3, None):
        assert (await raw(client, "/v1/chat/completions", json.dumps(body).encode())).status_code == 400


async def test_openapi_probes_need_no_auth_and_limits_are_declared(client) -> None:
    spec = await (await client.get("/openapi.json")).get_json()
    for path in ("/health", "/metrics"):
        assert spec["paths"][path]["get"]["security"] == []
    chat = spec["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert chat["properties"]["stop"]["oneOf"][0]["maxLength"] == 4096
    assert chat["properties"]["model"]["maxLength"] == 255


async def test_a_model_without_a_tokenizer_is_400_on_text_routes(make_client) -> None:
    c = make_client(FakeEngine(tokenizer=None))
    await error_of(await c.post("/v1/chat/completions", CHAT), 400)
    await error_of(await c.post("/v1/completions", {"prompt": "hi"}), 400)
    await error_of(await c.post("/v1/embeddings", {"input": "hi"}), 400, "input")
    await error_of(await c.post("/tokenize", {"input": "hi"}), 400)
    await error_of(await c.post("/chat", CHAT), 400)
    await error_of(await c.post("/complete", {"prompt": "hi"}), 400)
    resp = await c.post("/api/generate", {"model": "fake-model", "prompt": "hi", "stream": False})
    assert resp.status_code == 400 and "no tokenizer" in (await resp.get_json())["error"]


async def test_unknown_request_fields_are_logged_as_a_warning(client) -> None:
    assert (await client.post("/v1/chat/completions", {**CHAT, "temprature": 0.5, "store": True})).status_code == 200
    warned = [r for r in client.log_lines() if r.get("event") == "ignored request fields"]
    assert len(warned) == 1 and warned[0]["fields"] == ["store", "temprature"]
    assert (await client.post("/v1/chat/completions", {**CHAT, "temperature": 0.5})).status_code == 200
    assert len([r for r in client.log_lines() if r.get("event") == "ignored request fields"]) == 1


async def test_truncate_hands_long_prompts_to_the_engine(make_client) -> None:
    """`truncate: true` (Ollama's default) means the scheduler cuts the prompt (llama.cpp's rule): no 400."""
    c = make_client(limited(context=64))
    assert (
        await c.post("/v1/completions", {"prompt": "x" * 100, "max_tokens": 1, "truncate": True})
    ).status_code == 200
    resp = await c.post("/api/generate", {"model": "fake-model", "prompt": "x" * 100, "stream": False, "raw": True})
    assert resp.status_code == 200
    body = {"model": "fake-model", "prompt": "x" * 100, "stream": False, "raw": True, "truncate": False}
    assert (await c.post("/api/generate", body)).status_code == 400


async def test_messages_and_responses_enforce_the_context_length(make_client) -> None:
    c = make_client(limited(context=64))
    long = "x" * 100
    resp = await c.post(
        "/v1/messages", {"model": "fake-model", "max_tokens": 4, "messages": [{"role": "user", "content": long}]}
    )
    assert resp.status_code == 400 and "context length is 64" in json.dumps(await resp.get_json())
    resp = await c.post("/v1/responses", {"model": "fake-model", "input": long})
    assert resp.status_code == 400 and "context length is 64" in json.dumps(await resp.get_json())
    ok = await c.post(
        "/v1/messages", {"model": "fake-model", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    )
    assert ok.status_code == 200
