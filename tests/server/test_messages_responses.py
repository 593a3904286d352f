"""/v1/messages and /v1/responses on the FakeEngine: request translation, shapes, store, errors.
(The official clients against the real engine are in test_live_clients.py.)"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from modelc.errors import NotFoundError
from modelc.server import anthropic_shapes, responses_shapes, responses_store
from modelc.server.sse import parse_sse
from tests.server.fake_engine import FakeEngine, FakeTemplate

pytestmark = pytest.mark.anyio


def test_anthropic_translation_tool_blocks() -> None:
    body = {
        "max_tokens": 5,
        "system": [{"type": "text", "text": "sys"}],
        "messages": [
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": ""},
                    {"type": "text", "text": "let me see"},
                    {"type": "tool_use", "id": "toolu_1", "name": "w", "input": {"city": "Oslo"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sun"}]},
                    {"type": "text", "text": "thanks"},
                ],
            },
        ],
        "tools": [{"name": "w", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "tool", "name": "w", "disable_parallel_tool_use": True},
        "stop_sequences": ["END"],
    }
    chat = anthropic_shapes.chat_body(body)
    roles = [m["role"] for m in chat["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "user"]
    assert chat["messages"][2]["tool_calls"][0]["function"] == {"name": "w", "arguments": '{"city": "Oslo"}'}
    assert chat["messages"][3] == {"role": "tool", "tool_call_id": "toolu_1", "content": "sun"}
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "w"}}
    assert chat["parallel_tool_calls"] is False and chat["stop"] == ["END"]


def test_responses_items_and_store_bound() -> None:
    msgs = responses_shapes.input_messages(
        [
            {"role": "user", "content": [{"type": "input_text", "text": "q"}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "one"},
        ]
    )
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool"]
    assert [c["id"] for c in msgs[1]["tool_calls"]] == ["c1", "c2"]
    store = responses_store.ResponseStore(max_items=2)
    for i in range(3):
        store.put(f"r{i}", responses_store.Stored((), {}))
    assert len(store) == 2
    with pytest.raises(NotFoundError):
        store.get("r0")
    big = responses_store.Stored(({"role": "user", "content": "x" * 1000},), {})
    store = responses_store.ResponseStore(max_items=10, max_bytes=2500)
    for i in range(4):
        store.put(f"b{i}", big)
    assert len(store) == 2 and store.num_bytes <= 2500 and store.get("b3") is big
    store.delete("b3")
    assert len(store) == 1 and store.num_bytes == big.num_bytes


async def test_messages_stream_events_and_errors(make_client) -> None:
    c = make_client(api_key="k")
    h = {"x-api-key": "k"}
    resp = await c.http.post(
        "/v1/messages",
        json={"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}], "stream": True},
        headers=h,
    )
    assert resp.status_code == 200
    text = (await resp.get_data()).decode()
    events = [line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("event: ")]
    assert events[:2] == ["message_start", "content_block_start"]
    assert events[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert events.count("content_block_delta") == 4
    payloads = [p for p in parse_sse(text) if isinstance(p, dict)]
    assert payloads[-2]["delta"]["stop_reason"] == "max_tokens" and payloads[-2]["usage"]["output_tokens"] == 4
    bad = await c.http.post("/v1/messages", json={"max_tokens": 1, "messages": []}, headers={"x-api-key": "no"})
    assert bad.status_code == 401
    assert (await bad.get_json()) == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "incorrect API key provided"},
    }
    bad = await c.http.post("/v1/messages", json={"messages": [{"role": "user", "content": "x"}]}, headers=h)
    assert (await bad.get_json())["error"]["type"] == "invalid_request_error"


async def test_responses_store_false_and_tools(make_client) -> None:
    c = make_client()
    r = await c.post("/v1/responses", {"input": "hi", "max_output_tokens": 16, "store": False})
    rid = (await r.get_json())["id"]
    assert (await c.get(f"/v1/responses/{rid}")).status_code == 404
    r = await c.post("/v1/responses", {"input": "hi", "max_output_tokens": 16})
    rid = (await r.get_json())["id"]
    assert (await (await c.get(f"/v1/responses/{rid}")).get_json())["id"] == rid
    assert (await c.http.delete(f"/v1/responses/{rid}")).status_code == 200
    c.engine.reply = '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>'
    tools = [{"type": "function", "name": "f", "parameters": {"type": "object"}}]
    r = await c.post("/v1/responses", {"input": "hi", "tools": tools})
    out = (await r.get_json())["output"]
    assert [o["type"] for o in out] == ["function_call"] and out[0]["arguments"] == '{"a": 1}'
    bad = await c.post("/v1/responses", {"input": "x", "tools": [{"type": "web_search"}]})
    assert bad.status_code == 400 and (await bad.get_json())["error"]["param"] == "tools[0].type"


@dataclass
class ThinkTemplate(FakeTemplate):
    """The source shows <think>, so the reasoning parser (modelc.tokenizer.reasoning) is on."""

    @property
    def source(self) -> str:
        return "{{ '<think>' }}"


THINKER = "<think>\nTwo plus two.\n</think>\n\nIt is 4."


def sse_events(text: str) -> list[tuple[str, dict]]:
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        out.append((lines["event"], json.loads(lines["data"])))
    return out


async def test_thinking_blocks(make_client) -> None:
    c = make_client(FakeEngine(reply=THINKER, chat_template=ThinkTemplate()))
    body = {"max_tokens": 200, "messages": [{"role": "user", "content": "2+2?"}]}
    m = await (await c.post("/v1/messages", body)).get_json()
    assert m["content"] == [
        {"type": "thinking", "thinking": "Two plus two.", "signature": ""},
        {"type": "text", "text": "It is 4."},
    ]
    events = sse_events((await (await c.post("/v1/messages", {**body, "stream": True})).get_data()).decode())
    starts = [d["content_block"]["type"] for e, d in events if e == "content_block_start"]
    assert starts == ["thinking", "text"]
    deltas = [d["delta"] for e, d in events if e == "content_block_delta"]
    assert "".join(d.get("thinking", "") for d in deltas).strip() == "Two plus two."
    assert "".join(d.get("text", "") for d in deltas) == "It is 4."
    assert [d["index"] for e, d in events if e == "content_block_stop"] == [0, 1]


async def test_reasoning_items(make_client) -> None:
    c = make_client(FakeEngine(reply=THINKER, chat_template=ThinkTemplate()))
    r = await (await c.post("/v1/responses", {"input": "2+2?", "max_output_tokens": 200})).get_json()
    assert [o["type"] for o in r["output"]] == ["reasoning", "message"]
    assert r["output"][0]["content"][0]["text"] == "Two plus two."
    assert r["output"][1]["content"][0]["text"] == "It is 4."
    raw = await (await c.post("/v1/responses", {"input": "2+2?", "max_output_tokens": 200, "stream": True})).get_data()
    events = sse_events(raw.decode())
    added = [(d["output_index"], d["item"]["type"]) for e, d in events if e == "response.output_item.added"]
    assert added == [(0, "reasoning"), (1, "message")]
    thought = "".join(d["delta"] for e, d in events if e == "response.reasoning_text.delta")
    assert thought.strip() == "Two plus two."
    said = "".join(d["delta"] for e, d in events if e == "response.output_text.delta")
    assert said == "It is 4." and events[-1][1]["response"]["output"][1]["content"][0]["text"] == said
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))


async def test_errors_mid_stream(make_client) -> None:
    c = make_client(FakeEngine(fail_after_tokens=2))
    raw = await (
        await c.post("/v1/messages", {"max_tokens": 9, "messages": [{"role": "user", "content": "x"}], "stream": True})
    ).get_data()
    event, data = sse_events(raw.decode())[-1]
    assert event == "error" and data["type"] == "error" and data["error"]["type"] == "api_error"
    raw = await (await c.post("/v1/responses", {"input": "x", "max_output_tokens": 16, "stream": True})).get_data()
    event, data = sse_events(raw.decode())[-1]
    assert event == "error" and data["type"] == "error" and "injected engine failure" in data["message"]
    assert c.engine.num_active == 0
