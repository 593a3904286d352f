"""Reasoning kept apart, read by the official clients: openai's reasoning_content (whole and streamed) and
ollama's message.thinking, against the real server process on a FakeEngine whose template shows <think>."""

from __future__ import annotations

import openai
import pytest

from tests.server.live import LiveServer

REPLY = "<think>\nTwo plus two.\n</think>\n\nIt is 4."
MSGS = [{"role": "user", "content": "2+2?"}]


@pytest.fixture(scope="module")
def server():
    s = LiveServer("--think", "--reply", REPLY)
    yield s
    s.stop()


def test_openai_client_reads_reasoning_content(server) -> None:
    oai = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=30)
    msg = oai.chat.completions.create(model="fake-model", messages=MSGS, max_tokens=200).choices[0].message
    assert msg.content == "It is 4." and msg.reasoning_content == "Two plus two."
    chunks = list(oai.chat.completions.create(model="fake-model", messages=MSGS, max_tokens=200, stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas).strip() == "Two plus two."
    assert "".join(d.content or "" for d in deltas) == "It is 4."
    caps = {m.id: m.capabilities for m in oai.models.list()}  # modelc's extension field
    assert caps["fake-model"] == ["completion", "chat", "thinking"]


def test_ollama_client_reads_thinking(server) -> None:
    ollama = pytest.importorskip("ollama")
    client = ollama.Client(host=server.url)
    r = client.chat(model="fake-model", messages=MSGS, think=True, options={"num_predict": 200})
    assert r.message.thinking == "Two plus two." and r.message.content == "It is 4."
    parts = list(client.chat(model="fake-model", messages=MSGS, think=True, stream=True, options={"num_predict": 200}))
    assert "".join(p.message.thinking or "" for p in parts).strip() == "Two plus two."
    assert "".join(p.message.content or "" for p in parts) == "It is 4."
    assert "thinking" in client.show("fake-model").capabilities


def test_ollama_client_reads_generate_thinking(server) -> None:
    ollama = pytest.importorskip("ollama")
    client = ollama.Client(host=server.url)
    r = client.generate(model="fake-model", prompt="2+2?", think=True, options={"num_predict": 200})
    assert r.thinking.strip() == "Two plus two." and r.response == "It is 4."
    parts = list(client.generate(model="fake-model", prompt="2+2?", think=True, stream=True))
    assert "".join(p.thinking or "" for p in parts).strip() == "Two plus two."
    assert "".join(p.response for p in parts) == "It is 4."
