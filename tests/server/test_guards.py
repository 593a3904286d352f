"""Auth, rate limit, body limit, backpressure (503 + Retry-After), timeouts, 404/405, health while loading."""

from __future__ import annotations

import asyncio

import pytest

from modelc.server.ratelimit import RateLimiter
from modelc.server.state import ServerConfig, ServerState
from tests.server.conftest import error_of
from tests.server.fake_engine import FakeEngine

pytestmark = pytest.mark.anyio
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


async def test_auth(make_client) -> None:
    c = make_client(api_key="sekret")
    err = await error_of(await c.post("/v1/chat/completions", CHAT), 401)
    assert err["type"] == "authentication_error" and err["code"] == "invalid_api_key"
    await error_of(await c.post("/v1/chat/completions", CHAT, headers={"Authorization": "Bearer wrong"}), 401)
    await error_of(await c.post("/v1/chat/completions", CHAT, headers={"Authorization": "Basic sekret"}), 401)
    ok = await c.post("/v1/chat/completions", CHAT, headers={"Authorization": "Bearer sekret"})
    assert ok.status_code == 200
    for path in ("/health", "/info", "/props", "/metrics"):
        assert (await c.get(path)).status_code == 200, path
    await error_of(await c.get("/v1/models"), 401)


async def test_rate_limit_per_ip(make_client) -> None:
    c = make_client(rate_limit_per_min=3)
    for _ in range(3):
        assert (await c.get("/v1/models")).status_code == 200
    err = await error_of(await c.get("/v1/models"), 429)
    assert err["type"] == "rate_limit_error"
    assert (await c.get("/health")).status_code == 200  # exempt
    other = await c.http.get("/v1/models", scope_base={"client": ("10.0.0.9", 1234)})
    assert other.status_code == 200


def test_rate_limiter_refills() -> None:
    now = [0.0]
    rl = RateLimiter(2, clock=lambda: now[0])
    rl.check("a")
    rl.check("a")
    with pytest.raises(Exception, match="rate limit"):
        rl.check("a")
    now[0] = 30.0  # half a minute refills one token at 2/min
    rl.check("a")


async def test_body_limit_413(make_client) -> None:
    c = make_client(max_body_bytes=2048)
    err = await error_of(await c.post("/v1/completions", {"prompt": "x" * 5000}), 413)
    assert "too large" in err["message"] or "exceeds" in err["message"]


async def test_404_and_405(client) -> None:
    err = await error_of(await client.get("/v2/nothing"), 404)
    assert err["type"] == "not_found_error"
    resp = await client.get("/v1/chat/completions")
    await error_of(resp, 405)
    assert "POST" in resp.headers["Allow"]


async def test_max_concurrent_503(make_client) -> None:
    c = make_client(FakeEngine(delay_s=0.05), max_concurrent=1, retry_after_s=3)
    slow = asyncio.create_task(c.post("/v1/chat/completions", {**CHAT, "max_tokens": 10}))
    while c.state.num_in_flight == 0:
        await asyncio.sleep(0.005)
    resp = await c.post("/v1/chat/completions", CHAT)
    err = await error_of(resp, 503)
    assert resp.headers["Retry-After"] == "3" and err["code"] == "overloaded"
    assert (await c.get("/health")).status_code == 200  # probes are not inference
    assert (await slow).status_code == 200
    assert c.state.num_in_flight == 0
    assert (await c.post("/v1/chat/completions", CHAT)).status_code == 200


async def test_engine_queue_full_503_with_retry_after(make_client) -> None:
    c = make_client(FakeEngine(max_waiting=0))
    resp = await c.post("/v1/chat/completions", CHAT)
    await error_of(resp, 503)
    assert resp.headers["Retry-After"] == "2"
    resp = await c.post("/v1/chat/completions", {**CHAT, "stream": True})  # before any SSE byte
    await error_of(resp, 503)
    assert c.state.num_in_flight == 0


async def test_503s_without_a_wait_of_their_own_carry_the_servers_retry_after(make_client) -> None:
    """The server's retry_after_s (--retry-after), not a literal 1: loading, the engine's own overload."""
    c = make_client(retry_after_s=7)
    c.engine.max_waiting = 0  # the fake's queue-full error names its own wait (2 s): kept
    assert (await c.post("/v1/chat/completions", CHAT)).headers["Retry-After"] == "2"
    c.state.engine = None  # loading
    resp = await c.post("/v1/chat/completions", CHAT)
    assert resp.status_code == 503 and resp.headers["Retry-After"] == "7"
    resp = await c.get("/health")
    assert resp.status_code == 503 and resp.headers["Retry-After"] == "7"
    resp = await c.post("/v1/messages", {"model": "m", "max_tokens": 4, "messages": CHAT["messages"]})
    assert resp.status_code == 503 and resp.headers["Retry-After"] == "7"


async def test_request_timeout_aborts(make_client) -> None:
    c = make_client(FakeEngine(delay_s=0.05), request_timeout_s=0.15)
    err = await error_of(await c.post("/v1/chat/completions", {**CHAT, "max_tokens": 100}), 408)
    assert "timed out" in err["message"]
    assert len(c.engine.aborted) == 1 and c.engine.num_active == 0
    resp, events = await c.sse("/v1/chat/completions", {**CHAT, "max_tokens": 100, "stream": True})
    assert resp.status_code == 200 and events[-2]["error"]["code"] == "request_timeout"
    assert len(c.engine.aborted) == 2


async def test_health_while_loading() -> None:
    from modelc.server.app import create_app

    state = ServerState(None, ServerConfig())
    c = create_app(state).test_client()
    resp = await c.get("/health")
    assert resp.status_code == 503 and (await resp.get_json())["status"] == "loading"
    resp = await c.post("/v1/chat/completions", json=CHAT)
    await error_of(resp, 503)
    assert resp.headers["Retry-After"] == "1"
    state.engine = FakeEngine()
    assert (await c.get("/health")).status_code == 200


def test_config_checks() -> None:
    with pytest.raises(Exception, match="max-concurrent"):
        ServerConfig(max_concurrent=0)
    with pytest.raises(Exception, match="rate-limit"):
        ServerConfig(rate_limit_per_min=0)
