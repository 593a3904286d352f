"""RequestRun (server/run.py): every inference route takes its slot, runs and accounts through it.
The slot is released however the request ends, and every route counts its tokens."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.server.fake_engine import FakeEngine

pytestmark = pytest.mark.anyio
MSGS = [{"role": "user", "content": "hi"}]


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


async def metrics_text(c) -> str:
    return (await (await c.get("/metrics")).get_data()).decode()


async def wait_released(c) -> None:
    for _ in range(500):
        if c.state.num_in_flight == 0 and c.engine.num_active == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"slot not released: in flight {c.state.num_in_flight}, active {c.engine.num_active}")


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/chat/stream", "/api/chat"])
async def test_client_gone_mid_stream_releases_slot_and_aborts(make_client, path) -> None:
    c = make_client(FakeEngine(delay_s=0.01), max_concurrent=1)
    body = {"messages": MSGS, "max_tokens": 100_000, "stream": True}
    if path == "/api/chat":
        body = {"model": "fake-model", "messages": MSGS, "options": {"num_predict": 100_000}}
    headers = {"Content-Type": "application/json"}
    async with c.http.request(path, method="POST", headers=headers) as conn:
        await conn.send(json.dumps(body).encode())
        await conn.send_complete()
        for _ in range(3):  # a few chunks: the stream is running
            assert await asyncio.wait_for(conn.receive(), 30)
        assert c.state.num_in_flight == 1 and c.engine.num_active == 1
        await conn.disconnect()
    await wait_released(c)
    assert len(c.engine.aborted) == 1
    line = [ln for ln in c.log_lines() if ln["path"] == path][-1]
    assert line["status"] == 499 and line["completion_tokens"] > 0 and line["prompt_tokens"] > 0
    again = {**body, "stream": False, "max_tokens": 2} if path != "/api/chat" else {**body, "stream": False}
    if path == "/api/chat":
        again["options"] = {"num_predict": 2}
    assert (await c.post(path.removesuffix("/stream"), again)).status_code == 200  # the slot is free


async def test_timeout_mid_stream_releases_slot(make_client) -> None:
    c = make_client(FakeEngine(delay_s=0.02), request_timeout_s=0.2, max_concurrent=1)
    resp, events = await c.sse("/chat/stream", {"messages": MSGS, "max_tokens": 100_000})
    assert resp.status_code == 200 and events[-1]["error"]["code"] == "request_timeout"
    await wait_released(c)
    assert len(c.engine.aborted) == 1


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/embeddings", {"input": "hello there"}),
        ("/embeddings", {"inputs": ["hello", "there"]}),
        ("/v1/embeddings", {"input": ["hello", "there"]}),
        ("/api/embed", {"model": "fake-model", "input": ["hello", "there"]}),
        ("/api/embeddings", {"model": "fake-model", "prompt": "hello there"}),
    ],
)
async def test_embedding_routes_count_prompt_tokens(client, path, body) -> None:
    before = metric(await metrics_text(client), "modelc_prompt_tokens_total")
    resp = await client.post(path, body)
    assert resp.status_code == 200, await resp.get_data()
    texts = body.get("input", body.get("inputs", body.get("prompt")))
    texts = [texts] if isinstance(texts, str) else texts
    expected = sum(len(client.engine.tokenizer.encode(t)) for t in texts)
    after = metric(await metrics_text(client), "modelc_prompt_tokens_total")
    assert after - before == expected
    line = [ln for ln in client.log_lines() if ln["path"] == path][-1]
    assert line["prompt_tokens"] == expected and client.state.num_in_flight == 0


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": MSGS, "max_tokens": 3}),
        ("/v1/chat/completions", {"messages": MSGS, "max_tokens": 3, "stream": True}),
        ("/v1/completions", {"prompt": "hello", "max_tokens": 3}),
        ("/v1/completions", {"prompt": "hello", "max_tokens": 3, "stream": True}),
        ("/chat", {"messages": MSGS, "max_tokens": 3}),
        ("/chat/stream", {"messages": MSGS, "max_tokens": 3}),
        ("/complete", {"prompt": "hello", "max_tokens": 3}),
        ("/api/chat", {"model": "fake-model", "messages": MSGS, "options": {"num_predict": 3}}),
        ("/api/chat", {"model": "fake-model", "messages": MSGS, "options": {"num_predict": 3}, "stream": False}),
        ("/api/generate", {"model": "fake-model", "prompt": "hello", "options": {"num_predict": 3}}),
        ("/v1/messages", {"model": "fake-model", "messages": MSGS, "max_tokens": 3}),
        ("/v1/messages", {"model": "fake-model", "messages": MSGS, "max_tokens": 3, "stream": True}),
        ("/v1/responses", {"input": "hello", "max_output_tokens": 16}),  # OpenAI's minimum
        ("/v1/responses", {"input": "hello", "max_output_tokens": 16, "stream": True}),
    ],
)
async def test_generation_routes_account_tokens(client, path, body) -> None:
    text = await metrics_text(client)
    before = metric(text, "modelc_prompt_tokens_total"), metric(text, "modelc_tokens_generated_total")
    resp = await client.post(path, body)
    assert resp.status_code == 200
    await resp.get_data()
    text = await metrics_text(client)
    after = metric(text, "modelc_prompt_tokens_total"), metric(text, "modelc_tokens_generated_total")
    line = [ln for ln in client.log_lines() if ln["path"] == path][-1]
    n = body.get("max_output_tokens", 3)
    assert line["status"] == 200 and line["completion_tokens"] == n and line["prompt_tokens"] > 0
    assert after[0] - before[0] == line["prompt_tokens"] and after[1] - before[1] == n
    assert client.state.num_in_flight == 0 and client.engine.num_active == 0


class ForeignEvents(FakeEngine):
    """An engine that breaks the event contract: it yields look-alikes of modelc.request's events."""

    async def generate(self, prompt_token_ids, params, request_id=None):
        from types import SimpleNamespace

        yield SimpleNamespace(token_id=70, text="x", logprob=None, top_logprobs=())
        yield SimpleNamespace(finish_reason="stop", prompt_tokens=1, completion_tokens=1)


async def test_only_request_events_are_served(make_client) -> None:
    """The server reads modelc.request's TokenEvent/Finished by type: anything else is an engine error
    (a 500 naming it), never a duck-typed guess."""
    c = make_client(ForeignEvents())
    resp = await c.post("/v1/chat/completions", {"messages": MSGS, "max_tokens": 2})
    assert resp.status_code == 500
    assert "SimpleNamespace" in (await resp.get_json())["error"]["message"]
    await wait_released(c)
