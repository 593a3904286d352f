"""Bad input on every API surface is a 4xx in that API's own error shape (never a 500), out-of-range
values are refused as the official APIs refuse them, template errors are one clean line, and a forced
tool call cut by max_tokens is reported as incomplete (never as text holding modelc's call envelope)."""

from __future__ import annotations

import json

import pytest

from modelc.server import chat_plan
from modelc.server.bounds import BOUNDS
from modelc.tokenizer.chat_template import ChatTemplate
from tests.server.conftest import error_of
from tests.server.fake_engine import FakeEngine

pytestmark = pytest.mark.anyio
MSG = {"model": "fake-model", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
RESP = {"model": "fake-model", "input": "hi"}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


async def anthropic_error(resp, status: int) -> dict:
    assert resp.status_code == status, await resp.get_data()
    body = await resp.get_json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
    assert body["error"]["message"]
    return body["error"]


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
@pytest.mark.parametrize("kind", [{}, [], ["enabled"], 3, None])
async def test_thinking_type_of_any_shape_is_a_400_in_anthropic_shape(client, path, kind) -> None:
    err = await anthropic_error(await client.post(path, {**MSG, "thinking": {"type": kind}}), 400)
    assert err["type"] == "invalid_request_error" and "thinking.type" in err["message"]
    err = await anthropic_error(await client.post(path, {**MSG, "thinking": ["enabled"]}), 400)
    assert "thinking" in err["message"]


async def test_every_error_on_the_messages_api_is_anthropic_shaped(make_client) -> None:
    c = make_client(FakeEngine(fail_after_tokens=0))
    err = await anthropic_error(await c.post("/v1/messages", MSG), 500)
    assert err["type"] == "api_error"
    err = await anthropic_error(await c.post("/v1/messages/nope", MSG), 404)
    assert err["type"] == "not_found_error"
    err = await anthropic_error(await c.get("/v1/messages"), 405)
    assert err["type"] == "api_error" or err["type"] == "invalid_request_error"
    resp = await c.http.post("/v1/messages", data=b"{", headers={"Content-Type": "application/json"})
    assert (await anthropic_error(resp, 400))["type"] == "invalid_request_error"


async def test_other_surfaces_keep_their_own_error_shapes(client) -> None:
    resp = await client.post("/api/nope", {})
    assert resp.status_code == 404 and isinstance((await resp.get_json())["error"], str)
    await error_of(await client.post("/v1/nope", {}), 404)
    await error_of(await client.post("/v1/responses", {**RESP, "max_output_tokens": 0}), 400, "max_output_tokens")


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"temperature": 5}, "temperature"),
        ({"temperature": -0.1}, "temperature"),
        ({"top_k": -1}, "top_k"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"thinking": {"type": "enabled", "budget_tokens": -1}}, "thinking.budget_tokens"),
        ({"thinking": {"type": "enabled", "budget_tokens": 1023}}, "thinking.budget_tokens"),
        ({"thinking": {"type": "enabled"}}, "thinking.budget_tokens"),
        ({"max_tokens": 2000, "thinking": {"type": "enabled", "budget_tokens": 2000}}, "thinking.budget_tokens"),
    ],
)
async def test_messages_values_out_of_anthropics_ranges_are_400(client, change, param) -> None:
    err = await anthropic_error(await client.post("/v1/messages", {**MSG, **change}), 400)
    assert param in err["message"], err


async def test_messages_values_in_range_are_served(client) -> None:
    for change in (
        {"temperature": 1, "top_k": 0},
        {"max_tokens": 2048, "thinking": {"type": "enabled", "budget_tokens": 1024}},
        {"thinking": {"type": "disabled"}},
    ):
        resp = await client.post("/v1/messages", {**MSG, **change})
        assert resp.status_code == 200, await resp.get_data()


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"max_output_tokens": 15}, "max_output_tokens"),
        ({"n": 1_000_000}, "n"),
        ({"n": 2}, "n"),
        ({"top_logprobs": 1_000_000}, "top_logprobs"),
        ({"top_logprobs": -1}, "top_logprobs"),
        ({"reasoning": {"effort": "x"}}, "reasoning.effort"),
        ({"reasoning": {"effort": {}}}, "reasoning.effort"),
        ({"reasoning": "high"}, "reasoning"),
        ({"background": True}, "background"),
        ({"include": "logprobs"}, "include"),
    ],
)
async def test_responses_values_out_of_openais_ranges_are_400(client, change, param) -> None:
    err = await error_of(await client.post("/v1/responses", {**RESP, **change}), 400, param)
    assert param in err["message"]


async def test_responses_reasoning_effort_reaches_the_template(make_client) -> None:
    seen: list[dict] = []
    engine = FakeEngine()
    render = engine.chat_template.render

    def spy(messages, tools=None, add_generation_prompt=True, **kw):
        seen.append(kw)
        return render(messages, tools, add_generation_prompt, **kw)

    engine.chat_template.render = spy
    c = make_client(engine)
    for effort, expect in (("high", {"reasoning_effort": "high"}), ("none", {"enable_thinking": False})):
        resp = await c.post("/v1/responses", {**RESP, "reasoning": {"effort": effort}, "max_output_tokens": 16})
        assert resp.status_code == 200
        assert expect.items() <= seen[-1].items()


async def test_responses_top_logprobs_come_back_on_output_text(client) -> None:
    body = {**RESP, "max_output_tokens": 16, "top_logprobs": 2, "include": ["message.output_text.logprobs"]}
    out = await (await client.post("/v1/responses", body)).get_json()
    part = out["output"][0]["content"][0]
    assert len(part["logprobs"]) == 16 and all(len(e["top_logprobs"]) == 2 for e in part["logprobs"])
    assert "".join(e["token"] for e in part["logprobs"]) == part["text"]
    out = await (await client.post("/v1/responses", {**RESP, "max_output_tokens": 16})).get_json()
    assert out["output"][0]["content"][0]["logprobs"] == []


def test_the_openapi_bounds_come_from_the_table() -> None:
    from modelc.server.openapi_surfaces import MESSAGES_REQ, RESPONSES_REQ

    props = MESSAGES_REQ["properties"]
    assert props["temperature"]["maximum"] == 1 and props["top_k"]["minimum"] == 0
    assert props["thinking"]["properties"]["budget_tokens"]["minimum"] == BOUNDS["budget_tokens"].lo == 1024
    rprops = RESPONSES_REQ["properties"]
    assert rprops["max_output_tokens"]["minimum"] == 16
    assert rprops["top_logprobs"]["maximum"] == 20 and rprops["n"]["maximum"] == 1
    assert "x" not in rprops["reasoning"]["properties"]["effort"]["enum"]


@pytest.mark.parametrize(
    "source",
    [
        "{% macro f(x) %}{{ f(x) }}{% endmacro %}SECRET-SOURCE-LINE {{ f(1) }}",
        "SECRET-SOURCE-LINE {{ 1 / 0 }}",
        "SECRET-SOURCE-LINE {{ messages | nosuchfilter }}",
    ],
)
async def test_template_errors_are_one_clean_line(make_client, source) -> None:
    engine = FakeEngine()
    engine.chat_template = ChatTemplate(source)
    c = make_client(engine)
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    for path, body in (("/v1/chat/completions", chat), ("/v1/messages", MSG), ("/v1/responses", RESP)):
        resp = await c.post(path, body)
        assert resp.status_code == 400, await resp.get_data()
        data = await resp.get_json()
        message = data["error"]["message"]
        assert message.count("chat template failed") == 1, message
        assert "SECRET-SOURCE-LINE" not in message and "\n" not in message and "----" not in message


async def test_a_template_raise_is_its_own_message(make_client) -> None:
    engine = FakeEngine()
    engine.chat_template = ChatTemplate("{{ raise_exception('only user turns please') }}")
    c = make_client(engine)
    err = await error_of(await c.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]}), 400)
    assert err["message"] == "chat template error: only user turns please"


def forced_engine() -> FakeEngine:
    engine = FakeEngine()
    engine.constraint_replies = {**engine.constraint_replies, "tool_call": '{"name": "get_weather", "arguments": {}}'}
    return engine


async def test_a_forced_tool_call_cut_by_max_tokens_is_incomplete_not_text(make_client, monkeypatch) -> None:
    monkeypatch.setattr(chat_plan, "precompile", lambda engine, c: None)  # the byte tokenizer has no grammar engine
    c = make_client(forced_engine())
    chat = {"messages": [{"role": "user", "content": "w?"}], "tools": TOOLS, "tool_choice": "required"}
    out = await (await c.post("/v1/chat/completions", {**chat, "max_tokens": 10})).get_json()
    choice = out["choices"][0]
    assert choice["finish_reason"] == "length" and choice["message"]["content"] is None
    assert "tool_calls" not in choice["message"]
    resp, events = await c.sse("/v1/chat/completions", {**chat, "max_tokens": 10, "stream": True})
    deltas = [e["choices"][0] for e in events[:-1] if e["choices"]]
    assert "".join(d["delta"].get("content") or "" for d in deltas) == ""
    assert deltas[-1]["finish_reason"] == "length"
    whole = await (await c.post("/v1/chat/completions", {**chat, "max_tokens": 100})).get_json()
    assert whole["choices"][0]["finish_reason"] == "tool_calls"

    rtools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    rbody = {**RESP, "tools": rtools, "tool_choice": "required", "max_output_tokens": 16}
    out = await (await c.post("/v1/responses", rbody)).get_json()
    assert out["status"] == "incomplete" and out["incomplete_details"] == {"reason": "max_output_tokens"}
    assert out["output"] == []
    text = (await (await c.post("/v1/responses", {**rbody, "stream": True})).get_data()).decode()
    assert '"name": "get_weather"' not in text and "response.incomplete" in text

    mtools = [{"name": "get_weather", "input_schema": {"type": "object"}}]
    mbody = {**MSG, "max_tokens": 10, "tools": mtools, "tool_choice": {"type": "any"}}
    out = await (await c.post("/v1/messages", mbody)).get_json()
    assert out["stop_reason"] == "max_tokens"
    assert all(b["type"] != "text" or b["text"] == "" for b in out["content"]), out["content"]
    text = (await (await c.post("/v1/messages", {**mbody, "stream": True})).get_data()).decode()
    assert "get_weather" not in text and json.dumps("max_tokens") in text
