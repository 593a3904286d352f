"""Write tests/fixtures/templates/families/rendered.json: chat templates rendered by transformers.

Dev-only tool (needs transformers, which modelc never imports); run it in a reference venv:

    /work/refvenv/bin/python tools/make_template_fixtures.py

For each family template in tests/fixtures/templates/families/ (Qwen3, Gemma 3, Llama 3.2, Granite 3.3,
SmolLM3, gpt-oss) and each case (plain chat, system prompt, several turns, tools with a call and its
result, the family's thinking switches) it stores the inputs and transformers' render_jinja_template
output, with strftime_now frozen at 2026-01-15 (the test freezes modelc's the same way).
"""

from __future__ import annotations

import datetime as dt
import json
import pathlib

import transformers
from transformers.utils import chat_template_utils

DIR = pathlib.Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "templates" / "families"
FROZEN = dt.datetime(2026, 1, 15, 9, 30)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris <FR> & 'co'"},
                "unit": {"type": "string", "enum": ["c", "f"]},
            },
            "required": ["city"],
        },
    },
}
USER = [{"role": "user", "content": "Hello, who are you? 你好 🦙"}]
SYSTEM = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}]
TURNS = [
    {"role": "user", "content": "Hi!"},
    {"role": "assistant", "content": "Hello. How can I help?"},
    {"role": "user", "content": "Tell me a joke."},
]
THOUGHT_TURNS = [  # an earlier answer with its reasoning (templates drop or keep it in history)
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "<think>\nEasy sum.\n</think>\n\n4.", "reasoning_content": "Easy sum."},
    {"role": "user", "content": "And 3+3?"},
]
TOOL_TURNS = [
    {"role": "system", "content": "You help with weather."},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "a1b2c3d4e", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
        ],
    },
    {"role": "tool", "tool_call_id": "a1b2c3d4e", "name": "get_weather", "content": '{"temp": 21}'},
    {"role": "assistant", "content": "It is 21 C in Paris."},
    {"role": "user", "content": "Thanks."},
]
OSS_TURNS = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "4.", "thinking": "Easy sum."},
    {"role": "user", "content": "Weather in Paris?"},
]

# template file -> (bos, eos, [(case name, messages, tools, template kwargs)])
FAMILIES = {
    "Qwen-Qwen3-0.6B.jinja": ("", "<|im_end|>", [
        ("user", USER, None, {}),
        ("user-no-thinking", USER, None, {"enable_thinking": False}),
        ("system", SYSTEM, None, {"enable_thinking": True}),
        ("thought-history", THOUGHT_TURNS, None, {}),
        ("tools", TOOL_TURNS, [WEATHER], {}),
    ]),
    "google-gemma-3-it.jinja": ("<bos>", "<eos>", [
        ("user", USER, None, {}),
        ("system", SYSTEM, None, {}),
        ("turns", TURNS, None, {}),
    ]),
    "meta-llama-Llama-3.2-3B-Instruct.jinja": ("<|begin_of_text|>", "<|eot_id|>", [
        ("user", USER, None, {}),
        ("system", SYSTEM, None, {"date_string": "26 Jul 2024"}),
        ("tools", TOOL_TURNS, [WEATHER], {}),
    ]),
    "ibm-granite-granite-3.3-2B-Instruct.jinja": ("<|end_of_text|>", "<|end_of_text|>", [
        ("user", USER, None, {}),
        ("thinking", SYSTEM[1:], None, {"thinking": True}),
        ("tools", TOOL_TURNS, [WEATHER], {}),
    ]),
    "HuggingFaceTB-SmolLM3-3B.jinja": ("", "<|im_end|>", [
        ("user", USER, None, {}),
        ("no-thinking", SYSTEM, None, {"enable_thinking": False}),
        ("tools", TOOL_TURNS[1:], [WEATHER], {}),
    ]),
    "openai-gpt-oss-120b.jinja": ("<|startoftext|>", "<|return|>", [
        ("user", USER, None, {}),
        ("effort-high", SYSTEM, None, {"reasoning_effort": "high"}),
        ("thought-history", OSS_TURNS, [WEATHER], {}),
    ]),
}  # fmt: skip


class _FrozenDatetime(dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return FROZEN


def main() -> None:
    chat_template_utils.datetime = _FrozenDatetime  # strftime_now reads the module's datetime
    out = []
    for fname, (bos, eos, cases) in FAMILIES.items():
        source = (DIR / fname).read_text()
        for name, messages, tools, kwargs in cases:
            for gen in (True, False):
                rendered = chat_template_utils.render_jinja_template(
                    conversations=[messages], tools=tools, chat_template=source, add_generation_prompt=gen,
                    bos_token=bos, eos_token=eos, **kwargs,
                )  # fmt: skip
                text = rendered[0][0] if isinstance(rendered, tuple) else rendered[0]
                out.append({
                    "template": fname, "case": name, "bos_token": bos, "eos_token": eos, "messages": messages,
                    "tools": tools, "kwargs": kwargs, "add_generation_prompt": gen, "expected": text,
                })  # fmt: skip
    info = {"transformers": transformers.__version__, "frozen_now": FROZEN.isoformat(), "renders": out}
    (DIR / "rendered.json").write_text(json.dumps(info, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(out)} renders -> {DIR / 'rendered.json'}")


if __name__ == "__main__":
    main()
