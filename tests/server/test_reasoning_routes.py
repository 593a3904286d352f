"""Reasoning apart from the answer on the HTTP routes: OpenAI reasoning_content (whole and stream deltas,
reasoning_format none|deepseek), Ollama /api/chat `thinking` and its `think` switch."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from tests.server.conftest import error_of
from tests.server.fake_engine import FakeEngine, FakeTemplate

pytestmark = pytest.mark.anyio
MSGS = [{"role": "user", "content": "2+2?"}]
REPLY = "<think>\nTwo plus two.\n</think>\n\nIt is 4."


@dataclass
class ThinkTemplate(FakeTemplate):
    """A Qwen3-like template: the source shows <think>; enable_thinking=false closes an empty one."""

    opened: bool = False  # DeepSeek-R1 style: the prompt opens the reasoning itself

    @property
    def source(self) -> str:
        return "{%- if enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"

    def render(self, messages, tools=None, add_generation_prompt=True, **kw):
        out = super().render(messages, tools, add_generation_prompt, **kw)
        if kw.get("enable_thinking") is False:
            return out + "<think>\n\n</think>\n\n"
        return out + ("<think>\n" if self.opened else "")


def engine(reply: str = REPLY, **kw) -> FakeEngine:
    return FakeEngine(reply=reply, chat_template=ThinkTemplate(**kw))


async def test_chat_reasoning_content(make_client):
    c = make_client(engine())
    body = await (await c.post("/v1/chat/completions", {"messages": MSGS, "max_tokens": 200})).get_json()
    msg = body["choices"][0]["message"]
    assert msg == {"role": "assistant", "content": "It is 4.", "reasoning_content": "Two plus two."}
    none = await c.post("/v1/chat/completions", {"messages": MSGS, "max_tokens": 200, "reasoning_format": "none"})
    assert (await none.get_json())["choices"][0]["message"] == {"role": "assistant", "content": REPLY}
    await error_of(await c.post("/v1/chat/completions", {"messages": MSGS, "reasoning_format": 1}), 400)


async def test_chat_prompt_that_opens_the_reasoning(make_client):
    c = make_client(engine("Thought.</think>Answer.", opened=True))
    body = await (await c.post("/v1/chat/completions", {"messages": MSGS, "max_tokens": 200})).get_json()
    assert body["choices"][0]["message"]["reasoning_content"] == "Thought."
    assert body["choices"][0]["message"]["content"] == "Answer."


async def test_model_without_reasoning_has_no_field(make_client):
    c = make_client(FakeEngine(reply="<think>literal</think>"))  # its template never mentions thinking
    body = await (await c.post("/v1/chat/completions", {"messages": MSGS, "max_tokens": 200})).get_json()
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "<think>literal</think>"}


async def test_chat_stream_deltas(make_client):
    c = make_client(engine())
    resp, events = await c.sse("/v1/chat/completions", {"messages": MSGS, "max_tokens": 200, "stream": True})
    deltas = [e["choices"][0]["delta"] for e in events if isinstance(e, dict) and e.get("choices")]
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    content = "".join(d.get("content") or "" for d in deltas)
    assert reasoning.strip() == "Two plus two." and content == "It is 4."
    assert "<think>" not in reasoning + content and "</think>" not in reasoning + content
    first_answer = next(i for i, d in enumerate(deltas) if d.get("content"))
    assert all("reasoning_content" not in d for d in deltas[first_answer:])


async def test_chat_stream_with_tools_sends_reasoning_first(make_client):
    c = make_client(engine())
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    resp, events = await c.sse(
        "/v1/chat/completions", {"messages": MSGS, "max_tokens": 200, "stream": True, "tools": tools}
    )
    deltas = [e["choices"][0]["delta"] for e in events if isinstance(e, dict) and e.get("choices")]
    assert [d.get("reasoning_content") for d in deltas if "reasoning_content" in d] == ["Two plus two."]
    assert "".join(d.get("content") or "" for d in deltas) == "It is 4."


async def test_ollama_chat_thinking(make_client):
    c = make_client(engine())
    body = {"model": "fake-model", "messages": MSGS, "stream": False, "options": {"num_predict": 200}}
    one = await (await c.post("/api/chat", body)).get_json()
    assert one["message"]["thinking"] == "Two plus two." and one["message"]["content"] == "It is 4."
    lines = [
        json.loads(x)
        for x in (await (await c.post("/api/chat", {**body, "stream": True})).get_data()).split(b"\n")
        if x
    ]
    thinking = "".join(x["message"].get("thinking", "") for x in lines)
    assert thinking.strip() == "Two plus two." and "".join(x["message"]["content"] for x in lines) == "It is 4."
    await (await c.post("/api/chat", {**body, "think": False})).get_json()
    prompt = bytes(i - 3 for i in c.engine.calls[-1][0] if i >= 3).decode()
    assert prompt.endswith("<think>\n\n</think>\n\n")  # think:false reached the template as enable_thinking
    bad = await c.post("/api/chat", {**body, "think": "very"})
    assert bad.status_code == 400 and isinstance((await bad.get_json())["error"], str)  # Ollama's error shape


async def test_models_report_capabilities(make_client):
    c = make_client(engine())
    cards = (await (await c.get("/v1/models")).get_json())["data"]
    assert cards[0]["capabilities"] == ["completion", "chat", "thinking"]
    one = await (await c.get(f"/v1/models/{cards[0]['id']}")).get_json()
    assert one["capabilities"] == ["completion", "chat", "thinking"]
    show = await (await c.post("/api/show", {"model": cards[0]["id"]})).get_json()
    assert show["capabilities"] == ["completion", "chat", "thinking"]


@dataclass
class HarmonyTemplate(FakeTemplate):
    """A template whose source shows harmony's analysis channel (gpt-oss)."""

    @property
    def source(self) -> str:
        return "{{- '<|channel|>analysis<|message|>' }}{{ tools }}"


async def test_harmony_reasoning_and_tool_call(make_client):
    """gpt-oss: the analysis channel becomes reasoning_content, a commentary message to=functions.NAME a tool call."""
    reply = (
        "<|channel|>analysis<|message|>Need the weather.<|end|>"
        '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}'
    )
    c = make_client(FakeEngine(reply=reply, chat_template=HarmonyTemplate()))
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    body = {"messages": MSGS, "max_tokens": 400, "tools": tools}
    choice = (await (await c.post("/v1/chat/completions", body)).get_json())["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["reasoning_content"] == "Need the weather."
    call = choice["message"]["tool_calls"][0]["function"]
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Paris"}
    final = "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>Hi!"
    c = make_client(FakeEngine(reply=final, chat_template=HarmonyTemplate()))
    msg = (await (await c.post("/v1/chat/completions", {"messages": MSGS, "max_tokens": 400})).get_json())["choices"][0]
    assert msg["message"]["reasoning_content"] == "Easy." and msg["message"]["content"] == "Hi!"
