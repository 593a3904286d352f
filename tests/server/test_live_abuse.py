"""The real server under abuse: huge embedding inputs, megabyte stop strings and a 10 MB body neither
stall /health nor stop chat from working; SIGTERM ends in-flight streams with an error event and the
process within the drain timeout; a second SIGTERM ends it at once. Bounds are generous (2 noisy cores)."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from tests.server.live import LiveServer

pytestmark = pytest.mark.slow


def test_abusive_requests_do_not_stall_the_server() -> None:
    s = LiveServer("--tiny", timeout_s=120)
    try:
        abuse = [
            ("/v1/embeddings", {"input": "hello world " * 10_000}),  # 120k tokens: over the context
            ("/v1/embeddings", {"input": "hello world " * 10_000, "truncate": True}),
            ("/v1/completions", {"prompt": "hi", "max_tokens": 8, "stop": ["x" * 1_000_000] * 4}),
            ("/v1/completions", {"prompt": "word " * 2_000_000, "max_tokens": 4}),  # a 10 MB body: over 8 MiB
        ]
        statuses: dict[int, int] = {}

        def send(i: int, path: str, body: dict) -> None:
            statuses[i] = httpx.post(s.url + path, json=body, timeout=600).status_code

        threads = [threading.Thread(target=send, args=(i, *a)) for i, a in enumerate(abuse)]
        for t in threads:
            t.start()
        worst_s = 0.0
        with httpx.Client(base_url=s.url, timeout=120) as c:
            while any(t.is_alive() for t in threads):
                t0 = time.monotonic()
                assert c.get("/health").status_code == 200
                worst_s = max(worst_s, time.monotonic() - t0)
                time.sleep(0.05)
            chat = c.post(
                "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
            )
            assert chat.status_code == 200
        for t in threads:
            t.join()
        assert statuses == {0: 400, 1: 200, 2: 400, 3: 413}
        assert worst_s < 20.0, worst_s  # generous: the loop is never blocked for seconds
    finally:
        s.stop()


def _stream_lines(s: LiveServer) -> tuple[httpx.Client, httpx.Response]:
    c = httpx.Client(base_url=s.url, timeout=60)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 100_000, "stream": True}
    resp = c.send(c.build_request("POST", "/v1/chat/completions", json=body), stream=True)
    return c, resp


def test_sigterm_ends_streams_with_an_error_event_within_the_drain_timeout() -> None:
    s = LiveServer("--delay", "0.02", "--drain", "3")
    try:
        c, resp = _stream_lines(s)
        lines = resp.iter_lines()
        for _ in range(5):
            next(lines)
        start = time.monotonic()
        s.terminate()
        events = [ln[6:] for ln in lines if ln.startswith("data: ")]
        resp.close()
        c.close()
        assert events[-1] == "[DONE]"
        assert json.loads(events[-2])["error"]["code"] == "shutting_down"
        assert s.wait(30) == 0
        assert time.monotonic() - start < 3 + 10  # drain timeout + slack on a busy machine
    finally:
        s.stop()


def test_second_sigterm_exits_at_once() -> None:
    s = LiveServer("--delay", "0.02", "--drain", "300")
    try:
        c, resp = _stream_lines(s)
        lines = resp.iter_lines()  # kept: a dropped iterator closes the stream (then the drain is instant)
        next(lines)
        s.terminate()
        time.sleep(0.5)
        assert s.proc.poll() is None  # still draining its open stream
        s.terminate()
        assert s.wait(30) != 0  # well before the 300 s drain
        resp.close()
        c.close()
    finally:
        s.stop()


def test_the_ollama_client_reads_modelc_errors() -> None:
    ollama = pytest.importorskip("ollama")
    s = LiveServer("--delay", "0")
    try:
        client = ollama.Client(host=s.url)
        with pytest.raises(ollama.ResponseError) as e:
            client.generate(model="fake-model", prompt="hi", options={"num_predict": -5})
        assert e.value.status_code == 400 and "num_predict" in e.value.error and isinstance(e.value.error, str)
        with pytest.raises(ollama.ResponseError) as e:
            client.chat(model="no-such-model", messages=[{"role": "user", "content": "hi"}])
        assert e.value.status_code == 404 and "no-such-model" in e.value.error
        assert client.generate(model="fake-model", prompt="hi", options={"num_predict": 4}).response
    finally:
        s.stop()


def test_a_client_leaving_a_non_streamed_request_is_counted_as_499() -> None:
    s = LiveServer("--delay", "0.05")
    try:
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1000}
        with pytest.raises(httpx.TimeoutException):
            httpx.post(s.url + "/v1/chat/completions", json=body, timeout=1.0)  # the client gives up
        metrics = ""
        for _ in range(200):
            metrics = httpx.get(s.url + "/metrics", timeout=30).text
            if 'route="/v1/chat/completions",status="499"' in metrics:
                break
            time.sleep(0.05)
        assert 'modelc_requests_total{route="/v1/chat/completions",status="499"} 1.0' in metrics
        assert "modelc_active_requests 0.0" in metrics  # and its slot and sequence were released
    finally:
        s.stop()
