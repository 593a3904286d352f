"""The official `openai` (Responses API) and `anthropic` (Messages API) clients, unchanged, against the
real server on the real AsyncEngine (tiny random llama, byte tokenizer): the text is gibberish, the
protocol, the tool round trips and the token counts are real."""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest

from tests.server.live import LiveServer

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

SCHEMA = {
    "type": "object",
    "properties": {"color": {"enum": ["red", "green"]}, "ok": {"type": "boolean"}},
    "required": ["color", "ok"],
    "additionalProperties": False,
}
T0 = {"temperature": 0}  # the anthropic client has no temperature argument: sent as an extra field
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 8}},
    "required": ["city"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def server():
    s = LiveServer("--tiny", "--api-key", "k3y", timeout_s=120)
    yield s
    s.stop()


@pytest.fixture
def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="k3y", max_retries=0, timeout=120)


@pytest.fixture
def claude(server):
    return anthropic.Anthropic(base_url=server.url, api_key="k3y", max_retries=0, timeout=120)


def x_bias(server) -> dict[str, int]:
    (x,) = httpx.post(
        server.url + "/tokenize", json={"input": "x", "add_special": False}, headers={"Authorization": "Bearer k3y"}
    ).json()["tokens"]
    return {str(x): 100}


# ------------------------------------------------------------------ OpenAI Responses API
def test_responses_plain_and_previous_response_id(oai, server) -> None:
    r = oai.responses.create(
        model="tiny-llama", input="hi", instructions="be brief", max_output_tokens=16, temperature=0
    )
    assert r.object == "response" and r.status == "incomplete"
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 16 and r.usage.input_tokens > 0 and isinstance(r.output_text, str)
    again = oai.responses.create(model="tiny-llama", input="more", previous_response_id=r.id, max_output_tokens=16)
    assert again.previous_response_id == r.id
    assert again.usage.input_tokens > r.usage.input_tokens + r.usage.output_tokens - 16  # the history was sent
    assert oai.responses.retrieve(r.id).id == r.id
    gone = oai.responses.create(model="tiny-llama", input="x", max_output_tokens=16, store=False)
    with pytest.raises(openai.NotFoundError):
        oai.responses.create(model="tiny-llama", input="y", previous_response_id=gone.id, max_output_tokens=16)


def test_responses_stream_matches_plain(oai) -> None:
    kw = {"model": "tiny-llama", "input": "hi", "max_output_tokens": 16, "temperature": 0}  # OpenAI's minimum
    full = oai.responses.create(**kw)
    events = list(oai.responses.create(**kw, stream=True))
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.incomplete" and "response.output_text.done" in types
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == full.output_text == events[-1].response.output_text


def test_responses_stream_helper_json_schema(oai) -> None:
    fmt = {"format": {"type": "json_schema", "name": "pick", "schema": SCHEMA, "strict": True}}
    with oai.responses.stream(model="tiny-llama", input="hi", max_output_tokens=60, temperature=0, text=fmt) as s:
        deltas = [e.delta for e in s if e.type == "response.output_text.delta"]
        final = s.get_final_response()  # needs response.completed: the schema makes the answer end
    assert "".join(deltas) == final.output_text and final.status == "completed"
    jsonschema.validate(json.loads(final.output_text), SCHEMA)


def test_responses_json_schema_plain(oai) -> None:
    r = oai.responses.create(
        model="tiny-llama",
        input="pick",
        max_output_tokens=60,
        temperature=0,
        text={"format": {"type": "json_schema", "name": "pick", "schema": SCHEMA, "strict": True}},
    )
    assert r.status == "completed"
    jsonschema.validate(json.loads(r.output_text), SCHEMA)


def test_responses_function_call_round_trip(oai) -> None:
    tools = [{"type": "function", "name": "get_weather", "parameters": WEATHER, "strict": True}]
    r = oai.responses.create(
        model="tiny-llama", input="weather?", tools=tools, tool_choice="required", max_output_tokens=80, temperature=0
    )
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls and calls[0].name == "get_weather"
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER)
    out = {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"}
    r2 = oai.responses.create(
        model="tiny-llama", input=[out], previous_response_id=r.id, tools=tools, max_output_tokens=16, temperature=0
    )
    assert r2.status in ("completed", "incomplete") and r2.usage.input_tokens > r.usage.input_tokens
    # without the store: the client sends the whole conversation back, the output items as they came
    history = [{"role": "user", "content": "weather?"}, *r.output, out]
    r3 = oai.responses.create(model="tiny-llama", input=history, tools=tools, max_output_tokens=16, temperature=0)
    assert r3.usage.input_tokens == r2.usage.input_tokens
    events = list(
        oai.responses.create(
            model="tiny-llama",
            input="weather?",
            tools=tools,
            tool_choice="required",
            max_output_tokens=80,
            temperature=0,
            stream=True,
        )
    )
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert done and json.loads(done[0].arguments) == json.loads(calls[0].arguments)
    assert events[-1].type == "response.completed"


def test_responses_errors(oai) -> None:
    with pytest.raises(openai.BadRequestError):
        oai.responses.create(model="tiny-llama", input=[{"type": "bogus"}])
    bad_key = openai.OpenAI(base_url=oai.base_url, api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad_key.responses.create(model="tiny-llama", input="x")


# ------------------------------------------------------------------ Anthropic Messages API
def prompt_len(m) -> int:
    return m.usage.input_tokens + m.usage.cache_read_input_tokens


def test_messages_text_and_stream(claude) -> None:
    kw = {
        "model": "tiny-llama",
        "max_tokens": 8,
        "extra_body": {"temperature": 0},
        "system": "be brief",
        "messages": [{"role": "user", "content": "hi"}],
    }
    m = claude.messages.create(**kw)
    assert m.type == "message" and m.role == "assistant" and m.stop_reason == "max_tokens"
    assert m.usage.output_tokens == 8 and m.content[0].type == "text"
    with claude.messages.stream(**kw) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == m.content[0].text == final.content[0].text
    assert final.usage.output_tokens == 8 and final.stop_reason == "max_tokens"
    count = claude.messages.count_tokens(model="tiny-llama", system="be brief", messages=kw["messages"])
    assert count.input_tokens == m.usage.input_tokens + m.usage.cache_read_input_tokens  # prefix cache hits


def test_messages_stop_sequence(claude, server) -> None:
    m = claude.messages.create(
        model="tiny-llama",
        max_tokens=8,
        messages=[{"role": "user", "content": "hi"}],
        stop_sequences=["xxx"],
        extra_body={"logit_bias": x_bias(server), "temperature": 0},
    )
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == "xxx"


def test_messages_tool_round_trip(claude) -> None:
    tools = [{"name": "get_weather", "description": "weather", "input_schema": WEATHER}]
    msgs = [{"role": "user", "content": "weather?"}]
    m = claude.messages.create(
        model="tiny-llama", max_tokens=80, tools=tools, tool_choice={"type": "any"}, messages=msgs, extra_body=T0
    )
    uses = [b for b in m.content if b.type == "tool_use"]
    assert m.stop_reason == "tool_use" and uses and uses[0].name == "get_weather"
    jsonschema.validate(uses[0].input, WEATHER)
    msgs += [
        {"role": "assistant", "content": m.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "sunny"}]},
    ]
    m2 = claude.messages.create(model="tiny-llama", max_tokens=3, tools=tools, messages=msgs, extra_body=T0)
    assert prompt_len(m2) > prompt_len(m) + m.usage.output_tokens  # the call and its result were sent back
    with claude.messages.stream(
        model="tiny-llama", max_tokens=80, tools=tools, tool_choice={"type": "any"}, messages=msgs[:1], extra_body=T0
    ) as s:
        final = s.get_final_message()
    assert [b.input for b in final.content if b.type == "tool_use"] == [uses[0].input]


def test_messages_output_config_json_schema(claude) -> None:
    m = claude.messages.create(
        model="tiny-llama",
        max_tokens=60,
        messages=[{"role": "user", "content": "pick"}],
        output_config={"format": {"type": "json_schema", "schema": SCHEMA}},
        extra_body=T0,
    )
    assert m.stop_reason == "end_turn"
    jsonschema.validate(json.loads(m.content[0].text), SCHEMA)


def test_messages_errors_in_anthropic_shape(claude, server) -> None:
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model="tiny-llama", max_tokens=4, messages=[])
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.create(model="no-such", max_tokens=4, messages=[{"role": "user", "content": "x"}])
    bad = anthropic.Anthropic(base_url=server.url, api_key="nope", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as e:
        bad.messages.create(model="tiny-llama", max_tokens=4, messages=[{"role": "user", "content": "x"}])
    assert e.value.body["error"]["type"] == "authentication_error"


# ------------------------------------------------------------------ what the audit found (issue 41)
def test_openai_client_with_a_base_url_without_v1(server) -> None:
    bare = openai.OpenAI(base_url=server.url, api_key="k3y", max_retries=0, timeout=120)
    chat = bare.chat.completions.create(
        model="tiny-llama", messages=[{"role": "user", "content": "hi"}], max_tokens=3, temperature=0
    )
    assert chat.usage.completion_tokens == 3
    assert bare.completions.create(model="tiny-llama", prompt="hi", max_tokens=2).usage.completion_tokens == 2
    assert [m.id for m in bare.models.list()] == ["tiny-llama"]
    assert bare.models.retrieve("tiny-llama").id == "tiny-llama"
    emb = bare.embeddings.create(model="tiny-llama", input=["a", "b"])  # base64 on the wire, decoded by the client
    assert len(emb.data) == 2 and len(emb.data[0].embedding) > 0
    r = bare.responses.create(model="tiny-llama", input="hi", max_output_tokens=16, temperature=0)
    assert bare.responses.retrieve(r.id).id == r.id


def test_openai_client_lists_input_items(oai) -> None:
    items = [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]
    r = oai.responses.create(model="tiny-llama", input=items, max_output_tokens=16, temperature=0)
    page = oai.responses.input_items.list(r.id)
    assert [i.content[0].text for i in page.data] == ["two", "one"]  # newest first, as OpenAI
    first = oai.responses.input_items.list(r.id, order="asc", limit=1)
    assert first.has_more and first.data[0].content[0].text == "one"
    assert [i.content[0].text for i in oai.responses.input_items.list(r.id, order="asc")] == ["one", "two"]


def test_openai_client_gets_openais_range_errors(oai) -> None:
    for extra in ({"max_output_tokens": 0}, {"top_logprobs": 1_000_000}, {"reasoning": {"effort": "x"}}):
        with pytest.raises(openai.BadRequestError) as e:
            oai.responses.create(model="tiny-llama", input="hi", **extra)
        assert e.value.status_code == 400
    with pytest.raises(openai.BadRequestError, match="background"):
        oai.responses.create(model="tiny-llama", input="hi", background=True)


def test_anthropic_client_gets_400s_in_anthropic_shape(claude) -> None:
    msgs = [{"role": "user", "content": "x"}]
    for kw in (
        {"thinking": {"type": {}}},
        {"temperature": 5},
        {"top_k": -1},
        {"thinking": {"type": "enabled", "budget_tokens": -1}},
    ):
        with pytest.raises(anthropic.BadRequestError) as e:
            claude.messages.create(model="tiny-llama", max_tokens=4, messages=msgs, extra_body=kw)
        assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.count_tokens(model="tiny-llama", messages=msgs, extra_body={"thinking": {"type": []}})


def test_anthropic_stream_reports_input_tokens(claude) -> None:
    """message_delta carries the whole usage (LangChain's ChatAnthropic.stream() reads input tokens there)."""
    kw = {"model": "tiny-llama", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}], "extra_body": T0}
    with claude.messages.stream(**kw) as s:
        deltas = [e for e in s if e.type == "message_delta"]
        final = s.get_final_message()
    assert deltas[-1].usage.input_tokens == final.usage.input_tokens > 0
    assert deltas[-1].usage.output_tokens == 4


def test_a_forced_tool_call_cut_short_is_incomplete(oai, claude) -> None:
    tools = [{"type": "function", "name": "get_weather", "parameters": WEATHER, "strict": True}]
    r = oai.responses.create(
        model="tiny-llama", input="weather?", tools=tools, tool_choice="required", max_output_tokens=16, temperature=0
    )
    if r.status == "completed":
        pytest.skip("the tiny model finished its call within 16 tokens")
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.output == [] and r.output_text == ""
    m = claude.messages.create(
        model="tiny-llama",
        max_tokens=5,
        tools=[{"name": "get_weather", "input_schema": WEATHER}],
        tool_choice={"type": "any"},
        messages=[{"role": "user", "content": "weather?"}],
        extra_body=T0,
    )
    assert m.stop_reason == "max_tokens" and all(b.type != "text" or b.text == "" for b in m.content)
