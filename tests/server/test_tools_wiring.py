"""The chat route's tool handling, with a stand-in for modelc.server.tools (its own tests live with it):
where the tools go (template vs system prompt), which choices constrain, and the response shapes."""

from __future__ import annotations

import json
import types

import pytest

from modelc.request import Constraint
from tests.server.conftest import error_of
from tests.server.fake_engine import FakeEngine, FakeTemplate

pytestmark = pytest.mark.anyio

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]
MSGS = [{"role": "user", "content": "weather in Paris?"}]
CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'


def fake_tools() -> types.SimpleNamespace:
    def parse(text, tools):
        calls, rest = [], text
        while "<tool_call>" in rest:
            before, _, after = rest.partition("<tool_call>")
            body, _, rest = after.partition("</tool_call>")
            obj = json.loads(body)
            calls.append(
                {
                    "id": f"call_{len(calls)}",
                    "type": "function",
                    "function": {"name": obj["name"], "arguments": json.dumps(obj["arguments"])},
                }
            )
            rest = before + rest
        return rest.strip(), calls

    def constraint(tools, choice, parallel=False):
        if choice in ("auto", "none"):
            return None
        named = choice["function"]["name"] if isinstance(choice, dict) else None
        chosen = [t for t in tools if named is None or t["function"]["name"] == named]
        return Constraint("tool_call", json.dumps({"tools": chosen, "parallel": parallel}))

    return types.SimpleNamespace(
        render_tools_system_prompt=lambda tools: "TOOLS: " + ",".join(t["function"]["name"] for t in tools),
        parse_tool_calls=parse,
        tool_constraint=constraint,
    )


@pytest.fixture(autouse=True)
def _tools(monkeypatch) -> None:
    import modelc.server.chat_plan as chat
    import modelc.server.handling as handling
    import modelc.server.prompt as prompt

    monkeypatch.setattr(prompt, "tool_calls", fake_tools())
    monkeypatch.setattr(chat, "precompile", lambda engine, c: None)
    assert handling


async def test_auto_without_template_support_uses_system_prompt(make_client) -> None:
    c = make_client(FakeEngine(reply=CALL + CALL.replace("Paris", "Rome")))
    body = await (
        await c.post("/v1/chat/completions", {"messages": MSGS, "tools": TOOLS, "max_tokens": 400})
    ).get_json()
    prompt = c.engine.tokenizer.decode(c.engine.calls[0][0])
    assert prompt.startswith("<|system|>TOOLS: get_weather,get_time")
    assert c.engine.calls[0][1].constraint is None
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    calls = choice["message"]["tool_calls"]
    assert [json.loads(x["function"]["arguments"])["city"] for x in calls] == ["Paris", "Rome"]


async def test_template_with_tools_gets_them(make_client) -> None:
    c = make_client(FakeEngine(reply="plain answer", chat_template=FakeTemplate(takes_tools=True)))
    body = await (await c.post("/v1/chat/completions", {"messages": MSGS, "tools": TOOLS})).get_json()
    assert c.engine.tokenizer.decode(c.engine.calls[0][0]).startswith("<|tools|>['get_weather', 'get_time']")
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "plain answer"}
    assert body["choices"][0]["finish_reason"] == "stop"


async def test_required_and_named_constrain(make_client) -> None:
    c = make_client(FakeEngine(constraint_replies={"tool_call": CALL}))
    body = await (
        await c.post("/v1/chat/completions", {"messages": MSGS, "tools": TOOLS, "tool_choice": "required"})
    ).get_json()
    assert c.engine.calls[0][1].constraint.kind == "tool_call"
    assert body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    named = {"type": "function", "function": {"name": "get_weather"}}
    await c.post("/v1/chat/completions", {"messages": MSGS, "tools": TOOLS, "tool_choice": named})
    spec = json.loads(c.engine.calls[1][1].constraint.source)
    assert [t["function"]["name"] for t in spec["tools"]] == ["get_weather"] and spec["parallel"] is False
    await c.post(
        "/v1/chat/completions",
        {"messages": MSGS, "tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": True},
    )
    assert json.loads(c.engine.calls[2][1].constraint.source)["parallel"] is True


async def test_none_offers_no_tools(make_client) -> None:
    c = make_client(FakeEngine(reply=CALL))
    body = await (
        await c.post("/v1/chat/completions", {"messages": MSGS, "tools": TOOLS, "tool_choice": "none"})
    ).get_json()
    assert "TOOLS" not in c.engine.tokenizer.decode(c.engine.calls[0][0])
    assert body["choices"][0]["message"]["content"] == CALL and "tool_calls" not in body["choices"][0]["message"]


async def test_parallel_false_keeps_first(make_client) -> None:
    c = make_client(FakeEngine(reply=CALL + CALL))
    body = await (
        await c.post(
            "/v1/chat/completions", {"messages": MSGS, "tools": TOOLS, "parallel_tool_calls": False, "max_tokens": 400}
        )
    ).get_json()
    assert len(body["choices"][0]["message"]["tool_calls"]) == 1


async def test_streamed_tool_call_deltas(make_client) -> None:
    c = make_client(FakeEngine(reply=CALL))
    _, events = await c.sse("/v1/chat/completions", {"messages": MSGS, "tools": TOOLS, "stream": True})
    deltas = [e["choices"][0]["delta"] for e in events[:-1]]
    tc = [d["tool_calls"] for d in deltas if "tool_calls" in d]
    assert len(tc) == 1 and tc[0][0]["index"] == 0 and tc[0][0]["function"]["name"] == "get_weather"
    assert events[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert not any(d.get("content") for d in deltas)


async def test_tool_choice_with_response_format_400(make_client) -> None:
    c = make_client()
    await error_of(
        await c.post(
            "/v1/chat/completions",
            {"messages": MSGS, "tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}},
        ),
        400,
        "tool_choice",
    )
    await error_of(
        await c.post(
            "/v1/chat/completions",
            {"messages": MSGS, "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
        ),
        400,
        "tool_choice",
    )
