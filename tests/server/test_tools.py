"""Tool calls: parsing each model family's format into OpenAI's shape, the fallback prompt, tool_choice."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from modelc.engine.constraint import tool_call_schema
from modelc.errors import InvalidRequestError
from modelc.server.tools import new_call_id, parse_tool_calls, render_tools_system_prompt, tool_constraint

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
    {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {}}}},
]
ID = re.compile(r"^call_[A-Za-z0-9]{24}$")


def names_args(calls):
    for c in calls:
        assert ID.match(c["id"]) and c["type"] == "function"
        assert isinstance(c["function"]["arguments"], str)
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


def test_call_ids_unique_and_shaped():
    ids = {new_call_id() for _ in range(200)}
    assert len(ids) == 200 and all(ID.match(i) for i in ids)


@pytest.mark.parametrize(
    ("text", "content", "calls"),
    [
        (  # Hermes / Qwen, two parallel calls and surrounding text
            'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "search", "arguments": {"q": "été"}}\n</tool_call>',
            "Let me check.",
            [("get_weather", {"city": "Paris"}), ("search", {"q": "été"})],
        ),
        (  # Hermes block cut off at EOS before the closing tag
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}',
            "",
            [("get_weather", {"city": "Oslo"})],
        ),
        (  # Llama 3.1 JSON with python_tag and "parameters"
            '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Rome"}}',
            "",
            [("get_weather", {"city": "Rome"})],
        ),
        (  # Llama 3 several calls separated by ";"
            '{"name": "get_weather", "parameters": {"city": "A"}}; {"name": "search", "parameters": {}}',
            "",
            [("get_weather", {"city": "A"}), ("search", {})],
        ),
        (  # Mistral
            '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Nice"}}, {"name": "search", "arguments": {}}]',
            "",
            [("get_weather", {"city": "Nice"}), ("search", {})],
        ),
        (  # Mistral v11 form
            '[TOOL_CALLS]get_weather[ARGS]{"city": "Lyon"}',
            "",
            [("get_weather", {"city": "Lyon"})],
        ),
        (  # plain JSON, arguments as a JSON string
            '  {"name": "get_weather", "arguments": "{\\"city\\": \\"Bern\\"}"}\n',
            "",
            [("get_weather", {"city": "Bern"})],
        ),
        (  # plain JSON list in a fence (what a parallel tool_call constraint produces, fenced)
            '```json\n[{"name": "search", "arguments": {"q": 1}}]\n```',
            "",
            [("search", {"q": 1})],
        ),
    ],
)
def test_parse_formats(text, content, calls):
    got_content, got_calls = parse_tool_calls(text, TOOLS)
    assert got_content == content
    assert names_args(got_calls) == calls


@pytest.mark.parametrize(
    "text",
    [
        "The weather is nice today.",
        '{"answer": 42}',  # JSON, but not a call
        '{"name": "delete_everything", "arguments": {}}',  # not one of the tools
        "<tool_call>\n{not json}\n</tool_call>",
        '[TOOL_CALLS] [{"name": "get_weather", "arguments": ',  # truncated
        '{"name": "get_weather", "arguments": {"city": "X"}} and then some prose',
    ],
)
def test_not_calls_stay_content(text):
    assert parse_tool_calls(text, TOOLS) == (text, [])


def test_any_name_when_no_tools_given():
    content, calls = parse_tool_calls('{"name": "anything", "arguments": {}}', None)
    assert content == "" and names_args(calls) == [("anything", {})]


def test_fallback_prompt_lists_tools_and_round_trips():
    prompt = render_tools_system_prompt(TOOLS)
    assert "<tool_call>" in prompt and "get_weather" in prompt and "Weather for a city" in prompt
    listed = prompt.split("<tools>\n", 1)[1].rsplit("\n</tools>", 1)[0].splitlines()
    assert [json.loads(x)["name"] for x in listed] == ["get_weather", "search"]
    # a reply written the way the prompt asks is parsed back
    reply = '<tool_call>\n{"name": "search", "arguments": {"q": "x"}}\n</tool_call>'
    assert names_args(parse_tool_calls(reply, TOOLS)[1]) == [("search", {"q": "x"})]


def test_tool_constraint_choices():
    assert tool_constraint(TOOLS, "auto") is None
    assert tool_constraint(TOOLS, "none") is None
    assert tool_constraint(TOOLS, None) is None
    c = tool_constraint(TOOLS, "required")
    assert c.kind == "tool_call"
    schema = tool_call_schema(json.loads(c.source))
    jsonschema.validate({"name": "search", "arguments": {}}, schema)
    named = tool_constraint(TOOLS, {"type": "function", "function": {"name": "get_weather"}})
    schema = tool_call_schema(json.loads(named.source))
    jsonschema.validate({"name": "get_weather", "arguments": {"city": "P"}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "search", "arguments": {}}, schema)
    par = tool_call_schema(json.loads(tool_constraint(TOOLS, "required", parallel=True).source))
    jsonschema.validate([{"name": "search", "arguments": {}}], par)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([], par)


@pytest.mark.parametrize(
    ("tools", "choice", "message"),
    [
        (TOOLS, {"type": "function", "function": {"name": "nope"}}, "not in tools"),
        (TOOLS, {"type": "function"}, "tool_choice must be"),
        (TOOLS, "sometimes", "invalid tool_choice"),
        ([], "required", "non-empty 'tools'"),
    ],
)
def test_tool_constraint_errors(tools, choice, message):
    with pytest.raises(InvalidRequestError, match=message):
        tool_constraint(tools, choice)


_WEATHER_TOOL = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


@pytest.mark.parametrize(
    "text,city",
    [
        ('<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]', "Paris"),  # Granite 3.x
        ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>', "Rome"),  # Qwen3/SmolLM3
        (  # gpt-oss harmony, recipient in the channel header
            '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Oslo"}<|call|>',
            "Oslo",
        ),
        (  # harmony with the recipient before the channel
            '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city":"Bern"}<|call|>',
            "Bern",
        ),
    ],
)
def test_family_tool_call_syntaxes(text, city):
    content, calls = parse_tool_calls(text, _WEATHER_TOOL)
    assert content == "" and [c["function"]["name"] for c in calls] == ["get_weather"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": city}


def test_harmony_commentary_without_recipient_is_not_a_call():
    text = "<|channel|>commentary<|message|>Let me check.<|end|>"
    assert parse_tool_calls(text, _WEATHER_TOOL) == (text, [])
