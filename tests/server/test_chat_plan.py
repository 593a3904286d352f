"""One chat parse for every surface (server/chat_plan.py): OpenAI chat completions, Anthropic Messages,
OpenAI Responses, Ollama /api/chat and native /chat all become one ChatRequest and one plan_chat, so the
same conversation reaches the engine as the same prompt."""

from __future__ import annotations

import pytest

from modelc.config import EngineConfig, SchedulerConfig
from modelc.server import chat_plan
from tests.server.conftest import error_of
from tests.server.fake_engine import FakeEngine, FakeTemplate

pytestmark = pytest.mark.anyio

SYSTEM, USER = "be brief", "what is the capital of France?"
MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
BODIES = {
    "/v1/chat/completions": {"messages": MESSAGES, "max_tokens": 4},
    "/v1/messages": {"system": SYSTEM, "messages": [{"role": "user", "content": USER}], "max_tokens": 4},
    "/v1/responses": {"instructions": SYSTEM, "input": USER, "max_output_tokens": 16},
    "/api/chat": {"model": "fake-model", "messages": MESSAGES, "stream": False, "options": {"num_predict": 4}},
    "/chat": {"messages": MESSAGES, "max_tokens": 4},
}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


@pytest.fixture
def planned(monkeypatch) -> list[chat_plan.ChatRequest]:
    seen: list[chat_plan.ChatRequest] = []
    real = chat_plan.plan_chat

    def spy(engine, req):
        seen.append(req)
        return real(engine, req)

    monkeypatch.setattr(chat_plan, "plan_chat", spy)
    for module in ("openai_chat", "ollama_chat", "native_routes"):
        monkeypatch.setattr(f"modelc.server.{module}.plan_chat", spy)
    return seen


async def test_every_chat_surface_plans_the_same_prompt(make_client, planned) -> None:
    engine = FakeEngine()
    c = make_client(engine)
    prompts = {}
    for path, body in BODIES.items():
        r = await c.post(path, body)
        assert r.status_code == 200, (path, await r.get_data())
        prompts[path] = engine.calls[-1][0]
    assert len(planned) == len(BODIES)  # every surface went through plan_chat once
    assert all(req.messages == MESSAGES for req in planned)
    want = engine.tokenizer.encode(FakeTemplate().render(MESSAGES), add_special=True)
    assert all(p == want for p in prompts.values()), prompts


async def test_ollama_offers_tools_as_chat_completions_auto_does(make_client, planned) -> None:
    """A template without tools gets them as a system prompt, on both surfaces; neither forces a call."""
    engine = FakeEngine(reply="Paris")
    c = make_client(engine)
    ollama = {**BODIES["/api/chat"], "tools": TOOLS}
    openai = {**BODIES["/v1/chat/completions"], "tools": TOOLS, "tool_choice": "auto"}
    for path, body in (("/api/chat", ollama), ("/v1/chat/completions", openai)):
        assert (await c.post(path, body)).status_code == 200
    (ollama_prompt, ollama_params), (openai_prompt, openai_params) = engine.calls[-2:]
    assert ollama_prompt == openai_prompt and ollama_params.constraint is None is openai_params.constraint
    assert [req.tool_choice for req in planned] == ["auto", "auto"]


async def test_each_surface_keeps_its_own_defaults_and_bounds(make_client, planned) -> None:
    """The surfaces differ only in what they read: a prompt beyond the context is a 400 on chat completions
    and truncated on Ollama (its default), and native /chat samples greedily by default (the seed spec)."""
    engine = FakeEngine(config=EngineConfig(scheduler=SchedulerConfig(max_model_len=128)))
    c = make_client(engine)
    long = [{"role": "user", "content": "x" * 300}]
    await error_of(await c.post("/v1/chat/completions", {"messages": long}), 400, "messages")
    assert planned[-1].limit == 128
    r = await c.post("/api/chat", {"model": "fake-model", "messages": long, "stream": False})
    assert r.status_code == 200 and planned[-1].limit is None and engine.calls[-1][1].truncate
    assert (
        await c.post("/chat", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    ).status_code == 200
    assert engine.calls[-1][1].temperature == 0.0 and not planned[-1].reasoning
