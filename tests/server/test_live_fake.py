"""The real hypercorn server (subprocess, 127.0.0.1, free port) on a FakeEngine, driven by the
official openai client and raw httpx SSE; graceful shutdown with streams in flight."""

from __future__ import annotations

import json
import threading

import httpx
import openai
import pytest

from tests.server.live import LiveServer

MSGS = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def server():
    s = LiveServer("--api-key", "k1")
    yield s
    s.stop()


@pytest.fixture
def oai(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="k1", max_retries=0, timeout=30)


def test_openai_chat_and_stream(oai) -> None:
    r = oai.chat.completions.create(
        model="fake-model", messages=MSGS, max_tokens=5, temperature=0, n=2, logprobs=True, top_logprobs=2
    )
    assert len(r.choices) == 2 and all(len(c.message.content) == 5 for c in r.choices)
    assert r.choices[0].logprobs.content[0].top_logprobs[0].token == r.choices[0].message.content[0]
    assert r.usage.completion_tokens == 10
    chunks = list(
        oai.chat.completions.create(
            model="fake-model", messages=MSGS, max_tokens=4, stream=True, stream_options={"include_usage": True}
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(text) == 4 and chunks[-1].usage.completion_tokens == 4
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_openai_completions_stop(oai) -> None:
    r = oai.completions.create(model="fake-model", prompt="x", max_tokens=60, stop=["o"], temperature=0)
    assert "o" not in r.choices[0].text and r.choices[0].finish_reason == "stop"
    chunks = list(oai.completions.create(model="fake-model", prompt=["a", "b"], max_tokens=3, stream=True))
    assert {c.choices[0].index for c in chunks} == {0, 1}


def test_openai_embeddings_and_errors(oai) -> None:
    e = oai.embeddings.create(model="fake-model", input=["a", "b"])
    assert len(e.data) == 2 and len(e.data[0].embedding) == 8
    with pytest.raises(openai.NotFoundError):
        oai.chat.completions.create(model="nope", messages=MSGS)
    with pytest.raises(openai.BadRequestError) as exc:
        oai.chat.completions.create(model="fake-model", messages=MSGS, temperature=-1)
    assert exc.value.body["param"] == "temperature"
    bad = openai.OpenAI(base_url=oai.base_url, api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    assert [m.id for m in oai.models.list()] == ["fake-model"]


def test_raw_sse_and_health(server) -> None:
    with httpx.Client(base_url=server.url, headers={"Authorization": "Bearer k1"}, timeout=30) as c:
        assert c.get("/health").json()["status"] == "ok"
        with c.stream("POST", "/v1/chat/completions", json={"messages": MSGS, "max_tokens": 3, "stream": True}) as resp:
            assert resp.headers["content-type"].startswith("text/event-stream")
            lines = [ln for ln in resp.iter_lines() if ln]
        assert all(ln.startswith("data: ") for ln in lines) and lines[-1] == "data: [DONE]"
        payloads = [json.loads(ln[6:]) for ln in lines[:-1]]
        assert payloads[0]["choices"][0]["delta"]["role"] == "assistant"


def test_disconnect_aborts_and_server_keeps_serving() -> None:
    s = LiveServer("--delay", "0.02")
    try:
        with httpx.Client(base_url=s.url, timeout=30) as c:
            with c.stream("POST", "/v1/completions", json={"prompt": "x", "max_tokens": 1000, "stream": True}) as resp:
                for i, _ in enumerate(resp.iter_lines()):
                    if i > 4:
                        break  # close the connection mid-stream
            metrics = ""
            for _ in range(100):
                metrics = c.get("/metrics").text
                if "modelc_active_requests 0.0" in metrics and "modelc_num_requests_running 0.0" in metrics:
                    break
                threading.Event().wait(0.02)
            assert "modelc_active_requests 0.0" in metrics
            assert "modelc_num_requests_running 0.0" in metrics  # the engine sequence was aborted
            assert 'status="499"' in metrics  # an early disconnect is counted as nginx's 499
            # the tokens streamed before the disconnect are counted (0 before the fix)
            generated = [ln for ln in metrics.splitlines() if ln.startswith("modelc_tokens_generated_total ")]
            assert generated and float(generated[0].split()[1]) >= 1
    finally:
        s.stop()


def test_sigterm_drains_four_streams() -> None:
    s = LiveServer("--delay", "0.01")
    results: list[tuple[int, str]] = []
    started = threading.Semaphore(0)

    def stream_one() -> None:
        with (
            httpx.Client(base_url=s.url, timeout=30) as c,
            c.stream("POST", "/v1/completions", json={"prompt": "x", "max_tokens": 100, "stream": True}) as resp,
        ):
            lines = []
            for ln in resp.iter_lines():
                if ln and not lines:
                    started.release()
                if ln:
                    lines.append(ln)
            text = "".join(json.loads(ln[6:])["choices"][0]["text"] for ln in lines[:-1])
            results.append((resp.status_code, lines[-1]))
            assert len(text) == 100

    threads = [threading.Thread(target=stream_one) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        for _ in threads:  # all four are mid-stream (100 tokens take >= 1 s)
            assert started.acquire(timeout=30)
        s.terminate()
        for t in threads:
            t.join(30)
        assert s.wait(30) == 0
        assert results == [(200, "data: [DONE]")] * 4
        assert "STOPPED" in s.proc.stdout.read()
    finally:
        s.stop()
