"""The chat templates of today's families (Qwen3, Gemma 3, Llama 3.2, Granite 3.3, SmolLM3, gpt-oss) render
byte-identically to transformers' render_jinja_template (references: tools/make_template_fixtures.py)."""

from __future__ import annotations

import json
import pathlib

import pytest

from modelc.tokenizer.chat_template import ChatTemplate
from modelc.tokenizer.reasoning import GRANITE, HARMONY, THINK, reasoning_syntax

FAMILIES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "templates" / "families"
RENDERS = json.loads((FAMILIES / "rendered.json").read_text())["renders"]


@pytest.fixture
def families():
    return FAMILIES


@pytest.mark.parametrize(
    "case", RENDERS, ids=[f"{r['template'].split('.')[0]}-{r['case']}-{r['add_generation_prompt']}" for r in RENDERS]
)
def test_matches_transformers(families, frozen_now, case):
    tpl = ChatTemplate(
        (families / case["template"]).read_text(), bos_token=case["bos_token"], eos_token=case["eos_token"]
    )
    got = tpl.render(
        case["messages"], tools=case["tools"], add_generation_prompt=case["add_generation_prompt"], **case["kwargs"]
    )
    assert got == case["expected"]


def test_openai_string_arguments_render_like_objects(families, frozen_now):
    """Clients send tool-call arguments as JSON text; the templates get the object transformers documents."""
    case = next(r for r in RENDERS if r["template"].startswith("meta-llama") and r["case"] == "tools")
    msgs = json.loads(json.dumps(case["messages"]))
    for m in msgs:
        for call in m.get("tool_calls") or []:
            call["function"]["arguments"] = json.dumps(call["function"]["arguments"])
    tpl = ChatTemplate((families / case["template"]).read_text(), bos_token=case["bos_token"])
    assert (
        tpl.render(msgs, tools=case["tools"], add_generation_prompt=case["add_generation_prompt"]) == case["expected"]
    )


def test_family_templates_declare_their_reasoning(families):
    syntax = {p.name: reasoning_syntax(p.read_text()) for p in families.glob("*.jinja")}
    assert syntax["Qwen-Qwen3-0.6B.jinja"] is THINK
    assert syntax["HuggingFaceTB-SmolLM3-3B.jinja"] is THINK
    assert syntax["ibm-granite-granite-3.3-2B-Instruct.jinja"] is GRANITE
    assert syntax["openai-gpt-oss-120b.jinja"] is HARMONY
    assert syntax["google-gemma-3-it.jinja"] is None and syntax["meta-llama-Llama-3.2-3B-Instruct.jinja"] is None
