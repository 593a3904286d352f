"""The app on the real AsyncEngine with a Qwen3 GGUF (llama.cpp-converted tiny fixture) and its official chat
template: capabilities, enable_thinking reaching the template, and a prompt that opens the reasoning
(DeepSeek-R1 style) putting the whole random reply in reasoning_content."""

from __future__ import annotations

import anyio
import pytest

from modelc.api.async_engine import AsyncEngine
from modelc.config import CacheConfig, EngineConfig
from modelc.formats.detect import read_model
from modelc.server.app import create_app
from modelc.server.state import ServerConfig, ServerState

pytestmark = pytest.mark.anyio
MSGS = [{"role": "user", "content": "The farmer"}]


def _model(fixtures_dir, template: str):
    model = read_model(fixtures_dir / "models" / "variants" / "qwen3" / "gguf" / "model-f32.gguf")
    model.chat_template = template
    return model


async def _serve(model):
    eng_cfg = EngineConfig(threads=1, cache=CacheConfig(kv_cache_tokens=1024))
    return AsyncEngine.open(model, eng_cfg)


async def test_qwen3_gguf_with_its_template(fixtures_dir):
    template = (fixtures_dir / "templates" / "families" / "Qwen-Qwen3-0.6B.jinja").read_text()
    with anyio.fail_after(120):
        async with await _serve(_model(fixtures_dir, template)) as eng:
            c = create_app(ServerState(eng, ServerConfig(log_requests=False))).test_client()
            cards = (await (await c.get("/v1/models")).get_json())["data"]
            assert cards[0]["capabilities"] == ["completion", "chat", "tools", "thinking"]
            body = {"messages": MSGS, "max_tokens": 6, "temperature": 0, "ignore_eos": True}
            on = await (await c.post("/v1/chat/completions", json=body)).get_json()
            off_body = {**body, "chat_template_kwargs": {"enable_thinking": False}}
            off = await (await c.post("/v1/chat/completions", json=off_body)).get_json()
            # the closed empty <think> block is part of the prompt: more prompt tokens, no reasoning split
            assert off["usage"]["prompt_tokens"] > on["usage"]["prompt_tokens"]
            assert "reasoning_content" not in off["choices"][0]["message"]


async def test_prompt_that_opens_the_reasoning(fixtures_dir):
    template = (
        "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endfor %}"
        "{%- if add_generation_prompt %}<|im_start|>assistant\n<think>\n{%- endif %}"
    )
    with anyio.fail_after(120):
        async with await _serve(_model(fixtures_dir, template)) as eng:
            c = create_app(ServerState(eng, ServerConfig(log_requests=False))).test_client()
            body = {"messages": MSGS, "max_tokens": 6, "temperature": 0, "ignore_eos": True}
            msg = (await (await c.post("/v1/chat/completions", json=body)).get_json())["choices"][0]["message"]
            raw = await (await c.post("/v1/chat/completions", json={**body, "reasoning_format": "none"})).get_json()
            text = raw["choices"][0]["message"]["content"]
            assert "</think>" not in text and text.strip()  # random weights never close the block
            assert msg["reasoning_content"] == text.strip() and msg["content"] == ""
