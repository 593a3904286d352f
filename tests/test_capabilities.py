"""modelc.capabilities: what GET /v1/models, /api/show and `modelc inspect` report for a model."""

from __future__ import annotations

import json
import pathlib

import pytest
from typer.testing import CliRunner

from modelc.capabilities import capabilities

FAMILIES = pathlib.Path(__file__).resolve().parent / "fixtures" / "templates" / "families"


def _tpl(name: str) -> str:
    return (FAMILIES / name).read_text()


@pytest.mark.parametrize(
    "arch,template,config,want",
    [
        ("qwen3", "Qwen-Qwen3-0.6B.jinja", {}, ["completion", "chat", "tools", "thinking"]),
        ("qwen3moe", "Qwen-Qwen3-0.6B.jinja", {}, ["completion", "chat", "tools", "thinking"]),
        ("gemma3", "google-gemma-3-it.jinja", {}, ["completion", "chat"]),
        ("llama", "meta-llama-Llama-3.2-3B-Instruct.jinja", {}, ["completion", "chat", "tools"]),
        ("granite", "ibm-granite-granite-3.3-2B-Instruct.jinja", {}, ["completion", "chat", "tools", "thinking"]),
        # llama.cpp's copy of the SmolLM3 template (Unsloth-edited) has no tool section
        ("smollm3", "HuggingFaceTB-SmolLM3-3B.jinja", {}, ["completion", "chat", "thinking"]),
        ("llama", None, {}, ["completion"]),  # a base model: no template, no chat
        ("bert", None, {"pooling": {"mode": "mean"}}, ["embedding"]),
        ("llama", None, {"pooling": {"mode": "mean"}}, ["completion", "embedding"]),  # a GGUF embedding LLM
        ("mlp", None, {}, []),
    ],
)
def test_capabilities(arch, template, config, want):
    assert capabilities(arch, config, _tpl(template) if template else None) == want


def test_inspect_reports_capabilities(fixtures_dir):
    from modelc.cli.main import build_app

    app = build_app()

    path = fixtures_dir / "models" / "variants" / "qwen3" / "gguf" / "model-f32.gguf"
    res = CliRunner().invoke(app, ["inspect", str(path), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["capabilities"] == ["completion"]
    res = CliRunner().invoke(app, ["inspect", str(path)])
    assert "capabilities: completion" in res.output


def test_a_cross_encoder_reranks_and_is_no_embedding_model() -> None:
    ce = {"hf_config": {"architectures": ["XLMRobertaForSequenceClassification"]}}
    assert capabilities("bert", {}, None, ce) == ["rerank"]
    assert capabilities("bert", {}, None, {"hf_config": {"architectures": ["BertModel"]}}) == ["embedding"]
    assert capabilities("bert", {}, None, {"hf_config": "not a dict"}) == ["embedding"]
