"""The drain timeout (server/daemon.py calls generation.interrupt_all) ends every kind of engine work
with a 503 `shutting_down` and Retry-After, in the API's own error shape: generations, and the engine
calls of embeddings, rerank and /infer (which used to be cut off with an empty 500)."""

from __future__ import annotations

import asyncio
from typing import ClassVar

import anyio
import pytest

from modelc.errors import ShuttingDownError
from modelc.server.generation import interrupt_all
from tests.server.fake_engine import FakeEngine

pytestmark = pytest.mark.anyio


class SlowEngine(FakeEngine):
    """Every engine call waits (as a long batch would) until the drain ends it."""

    serves: ClassVar[frozenset] = frozenset({"generate", "embed", "rerank", "infer"})
    num_waiting: int = 0

    async def _wait(self) -> None:
        self.num_waiting += 1
        try:
            await anyio.sleep(3600)
        finally:
            self.num_waiting -= 1

    async def embed(self, token_id_lists):
        await self._wait()

    async def rerank(self, query, documents, **kw):
        await self._wait()

    async def infer(self, payload):
        await self._wait()


CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10_000}
CASES = [
    ("/v1/embeddings", {"input": "hi"}, "openai"),
    ("/embeddings", {"input": "hi"}, "openai"),
    ("/v1/rerank", {"query": "q", "documents": ["a", "b"]}, "openai"),
    ("/infer", {"input": [1.0, 2.0]}, "openai"),
    ("/api/embed", {"model": "fake-model", "input": "hi"}, "ollama"),
    ("/api/chat", {"model": "fake-model", "stream": False, **CHAT}, "ollama"),
    (
        "/api/generate",
        {"model": "fake-model", "prompt": "hi", "stream": False, "options": {"num_predict": 10_000}},
        "ollama",
    ),
    ("/v1/chat/completions", CHAT, "openai"),
    ("/v1/responses", {"input": "hi"}, "openai"),
    ("/v1/messages", CHAT, "anthropic"),
]


@pytest.mark.parametrize(("path", "body", "shape"), CASES, ids=[c[0] for c in CASES])
async def test_the_drain_answers_503_shutting_down_on_every_route(make_client, path, body, shape) -> None:
    engine = SlowEngine(delay_s=0.05)
    c = make_client(engine)
    task = asyncio.create_task(c.post(path, body))
    with anyio.fail_after(30):
        while engine.num_waiting == 0 and engine.num_active == 0:
            await asyncio.sleep(0.01)
    assert interrupt_all(ShuttingDownError("the server is shutting down: the drain timeout ended this request")) >= 1
    resp = await asyncio.wait_for(task, 30)
    assert resp.status_code == 503, await resp.get_data()
    assert resp.headers["Retry-After"] == "1"
    data = await resp.get_json()
    if shape == "openai":
        assert data["error"]["code"] == "shutting_down" and "shutting down" in data["error"]["message"]
    elif shape == "ollama":
        assert "shutting down" in data["error"]
    else:
        assert data["type"] == "error" and data["error"]["type"] == "overloaded_error"
    assert c.state.num_in_flight == 0 and engine.num_waiting == 0
    line = c.log_lines()[-1]
    assert line["status"] == 503
