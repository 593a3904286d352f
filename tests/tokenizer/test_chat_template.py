"""ChatTemplate (minijinja) renders byte-identically to jinja2 set up as transformers' apply_chat_template."""

from __future__ import annotations

import json
from datetime import datetime

import jinja2
import jinja2.ext
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from modelc.errors import InvalidRequestError
from modelc.tokenizer.chat_template import ChatTemplate, TemplateError, normalize_messages

SPECIAL = {
    "NousResearch-Hermes": ("<|begin_of_text|>", "<|im_end|>"),
    "Qwen-Qwen2.5": ("", "<|im_end|>"),
    "google-gemma": ("<bos>", "<eos>"),
    "meta-llama-Llama-3.1": ("<|begin_of_text|>", "<|eot_id|>"),
    "microsoft-Phi-3.5": ("<s>", "<|endoftext|>"),
    "mistralai-Mistral": ("<s>", "</s>"),
}
TOOL_TEMPLATES = ("NousResearch-Hermes", "Qwen-Qwen2.5", "meta-llama-Llama-3.1", "mistralai-Mistral")

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris <FR> & 'co'"},
                "unit": {"type": "string", "enum": ["c", "f"], "description": "Unit"},
            },
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "Words to find"}},
            "required": ["query"],
        },
    },
}

CONVERSATIONS = {
    "user": [{"role": "user", "content": "Hello, who are you? 你好 🦙"}],
    "system_user": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is 2+2?"},
    ],
    "multi_turn": [
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello. How can I help?"},
        {"role": "user", "content": [{"type": "text", "text": "Tell me"}, {"type": "text", "text": "a joke."}]},
    ],
}
TOOL_CONVERSATION = [
    {"role": "system", "content": "You help with weather."},
    {"role": "user", "content": "Weather in Paris and Oslo?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "a1b2c3d4e",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "a1b2c3d4e", "name": "get_weather", "content": '{"temp": 21}'},
    {"role": "assistant", "content": "It is 21 C in Paris."},
    {"role": "user", "content": "Thanks."},
]


def template_path(fixtures_dir, key):
    matches = [p for p in (fixtures_dir / "templates").glob("*.jinja") if key in p.name]
    assert len(matches) == 1, key
    return matches[0]


def transformers_render(source, messages, *, tools, add_generation_prompt, bos_token, eos_token):
    """jinja2 configured exactly like transformers.utils.chat_template_utils._compile_jinja_template."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source).render(
        messages=messages,
        tools=tools,
        documents=None,
        add_generation_prompt=add_generation_prompt,
        bos_token=bos_token,
        eos_token=eos_token,
    )


def cases():
    for key in SPECIAL:
        for name in CONVERSATIONS:
            for gen in (True, False):
                yield pytest.param(key, name, None, gen, id=f"{key}-{name}-{gen}")
    for key in TOOL_TEMPLATES:
        for gen in (True, False):
            yield pytest.param(key, "tools", [WEATHER, SEARCH], gen, id=f"{key}-tools-{gen}")


@pytest.mark.parametrize(("key", "conv", "tools", "gen"), list(cases()))
def test_matches_transformers_jinja2(fixtures_dir, key, conv, tools, gen):
    source = template_path(fixtures_dir, key).read_text()
    bos, eos = SPECIAL[key]
    messages = TOOL_CONVERSATION if conv == "tools" else CONVERSATIONS[conv]
    if key == "google-gemma" and messages[0]["role"] == "system":
        with pytest.raises(TemplateError, match="System role not supported"):
            ChatTemplate(source, bos_token=bos, eos_token=eos).render(messages, add_generation_prompt=gen)
        return
    if key == "NousResearch-Hermes" and tools is None:
        tools = []  # the tool_use variant iterates `tools` unconditionally (jinja2 fails on None)
    expected = transformers_render(
        source,
        normalize_messages(messages),
        tools=tools,
        add_generation_prompt=gen,
        bos_token=bos,
        eos_token=eos,
    )
    got = ChatTemplate(source, bos_token=bos, eos_token=eos).render(messages, tools=tools, add_generation_prompt=gen)
    assert got == expected
    assert len(got) > 20


def test_tool_templates_take_tools(fixtures_dir):
    for key in TOOL_TEMPLATES:
        assert ChatTemplate(template_path(fixtures_dir, key).read_text()).takes_tools, key
    assert not ChatTemplate(template_path(fixtures_dir, "google-gemma").read_text()).takes_tools


def test_tool_schema_not_html_escaped(fixtures_dir):
    tpl = ChatTemplate(template_path(fixtures_dir, "Qwen-Qwen2.5").read_text())
    out = tpl.render(CONVERSATIONS["user"], tools=[WEATHER])
    assert "Paris <FR> & 'co'" in out
    assert '"name": "get_weather"' in out


def test_tojson_options():
    tpl = ChatTemplate(
        "{{ messages[0] | tojson(indent=2) }}|{{ 'é' | tojson }}|{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}"
    )
    out = tpl.render([{"role": "user", "content": "<x>"}])
    assert out == json.dumps({"role": "user", "content": "<x>"}, indent=2) + '|"é"|{"a": 2, "b": 1}'


def test_raise_exception_becomes_template_error():
    tpl = ChatTemplate("{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}ok")
    assert tpl.render([{"role": "user", "content": "x"}]) == "ok"
    with pytest.raises(TemplateError, match="first must be user"):
        tpl.render([{"role": "assistant", "content": "x"}])


def test_python_string_methods_and_loopcontrols():
    src = (
        "{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}"
        "{{ m.content.strip().upper() }}{% if m.content.startswith(' a') %}!{% endif %},{% endfor %}"
        "{{ strftime_now('%Y')|length }}"
    )
    msgs = [{"role": "user", "content": " a b "}, {"role": "user", "content": "c"}, {"role": "user", "content": "d"}]
    assert ChatTemplate(src).render(msgs) == "A B!,C,4"


def test_invalid_template_and_messages():
    with pytest.raises(TemplateError, match="invalid chat template"):
        ChatTemplate("{% for x in %}")
    with pytest.raises(InvalidRequestError):
        ChatTemplate("x").render([{"content": "no role"}])
    with pytest.raises(InvalidRequestError, match="image_url"):
        ChatTemplate("x").render([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])


def test_fallback_formats():
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    chatml = ChatTemplate.fallback(chatml=True)
    assert (
        chatml.render(msgs) == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    )
    plain = ChatTemplate.fallback(chatml=False, bos_token="<s>")
    assert plain.render(msgs) == "<s>system: S\nuser: U\nassistant:"
    assert plain.render(msgs, add_generation_prompt=False) == "<s>system: S\nuser: U\n"


def test_arguments_string_becomes_dict_for_templates():
    msgs = normalize_messages(TOOL_CONVERSATION)
    assert msgs[2]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert msgs[2]["content"] == ""
    assert "tool_calls" not in msgs[0]


def test_content_lists_for_templates_that_loop_over_parts(fixtures_dir):
    for path in (fixtures_dir / "templates").glob("*.jinja"):
        assert not ChatTemplate(path.read_text()).takes_content_lists, path.name
    src = (
        "{% for m in messages %}{% if m.content is string %}{{ m.content }}"
        "{% else %}{% for part in m['content'] %}[{{ part.text }}]{% endfor %}{% endif %}|{% endfor %}"
    )
    tpl = ChatTemplate(src)
    assert tpl.takes_content_lists
    msgs = [{"role": "user", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "a"}, "b"]}]
    assert tpl.render(msgs) == "s|[a][b]|"
    with pytest.raises(InvalidRequestError, match="image_url"):
        tpl.render([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])
