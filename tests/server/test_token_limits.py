"""A per-request token budget for embeddings and rerank (OpenAI's 300k by default, --max-request-tokens),
and a token-aware rate limit (--rate-limit-tokens: model tokens per minute per client IP, charged what
each request used)."""

from __future__ import annotations

import pathlib

import pytest

from modelc.api.engines import EncoderEngine
from modelc.artifact.reader import open_artifact
from modelc.errors import RateLimitError
from modelc.pack import pack
from modelc.server.ratelimit import TokenRateLimiter
from modelc.server.state import ServerConfig
from tests.server.conftest import error_of

pytestmark = pytest.mark.anyio
RERANK = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "rerank" / "tiny_bert_ce"


def test_the_default_budget_is_openais() -> None:
    assert ServerConfig().max_request_tokens == 300_000
    with pytest.raises(Exception, match="max-request-tokens"):
        ServerConfig(max_request_tokens=0)
    with pytest.raises(Exception, match="rate-limit-tokens"):
        ServerConfig(rate_limit_tokens_per_min=0)


async def test_embeddings_over_the_budget_are_400_before_any_engine_call(make_client) -> None:
    c = make_client(max_request_tokens=100)
    calls: list[int] = []
    real = c.engine.embed

    async def spy(lists):
        calls.append(len(lists))
        return await real(lists)

    c.engine.embed = spy
    ok = await c.post("/v1/embeddings", {"input": ["x" * 40, "y" * 40]})  # 2 x (BOS + 40) = 82 tokens
    assert ok.status_code == 200 and (await ok.get_json())["usage"]["prompt_tokens"] == 82
    calls.clear()
    for path, body, param in (
        ("/v1/embeddings", {"input": ["x" * 40, "y" * 40, "z" * 40]}, "input"),
        ("/embeddings", {"inputs": ["x" * 60, "y" * 60]}, "inputs"),
        ("/v1/embeddings", {"input": [[5] * 60, [6] * 60]}, "input"),
    ):
        err = await error_of(await c.post(path, body), 400, param)
        assert "limit of 100 input tokens per request" in err["message"] and "--max-request-tokens" in err["message"]
    resp = await c.post("/api/embed", {"model": "fake-model", "input": ["x" * 60, "y" * 60]})
    assert resp.status_code == 400 and "limit of 100" in (await resp.get_json())["error"]
    assert calls == []  # refused before the engine ran


async def test_no_budget_when_lifted(make_client) -> None:
    c = make_client(max_request_tokens=None)
    resp = await c.post("/v1/embeddings", {"input": ["x" * 2000] * 200})  # 400k tokens
    assert resp.status_code == 200 and (await resp.get_json())["usage"]["prompt_tokens"] == 200 * 2001


async def test_rerank_over_the_budget_is_400(make_client, tmp_path) -> None:
    out = tmp_path / "ce.modelc"
    pack(RERANK, out=out, name="ce")
    engine = EncoderEngine(open_artifact(out))
    docs = ["hello world"] * 10
    whole = await (await make_client(engine).post("/v1/rerank", {"query": "hello", "documents": docs})).get_json()
    used = whole["usage"]["prompt_tokens"]
    c = make_client(engine, max_request_tokens=used - 1)
    for path in ("/v1/rerank", "/v2/rerank"):
        resp = await c.post(path, {"query": "hello", "documents": docs})
        assert resp.status_code == 400, await resp.get_data()
        body = await resp.get_json()
        message = body["message"] if path == "/v2/rerank" else body["error"]["message"]
        assert f"hold {used} tokens" in message and f"limit of {used - 1}" in message
    assert (
        await make_client(engine, max_request_tokens=used).post("/v1/rerank", {"query": "hello", "documents": docs})
    ).status_code == 200


def test_token_bucket_charges_what_was_used_and_refills() -> None:
    now = [0.0]
    rl = TokenRateLimiter(600, clock=lambda: now[0])  # 10 tokens a second
    rl.check("a")
    rl.charge("a", 900)  # one large request may overdraw the bucket
    with pytest.raises(RateLimitError) as e:
        rl.check("a")
    assert "600 tokens per minute" in e.value.message and e.value.retry_after_s == 30  # 300 tokens of debt
    rl.check("b")  # per client
    now[0] = 29.0
    with pytest.raises(RateLimitError):
        rl.check("a")
    now[0] = 30.5
    rl.check("a")


async def test_token_rate_limit_counts_prompt_and_generated_tokens(make_client) -> None:
    c = make_client(rate_limit_tokens_per_min=50)
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}
    first = await c.post("/v1/chat/completions", chat)
    usage = (await first.get_json())["usage"]
    assert first.status_code == 200 and 25 < usage["total_tokens"] < 50
    second = await c.post("/v1/chat/completions", chat)  # 50 - (prompt + 10) > 0: still let in
    assert second.status_code == 200
    resp = await c.post("/v1/chat/completions", chat)
    err = await error_of(resp, 429)
    assert "tokens per minute" in err["message"] and int(resp.headers["Retry-After"]) >= 1
    assert (await c.get("/health")).status_code == 200  # probes are exempt
    other = await c.http.post("/v1/chat/completions", json=chat, scope_base={"client": ("10.0.0.9", 1234)})
    assert other.status_code == 200  # another client has its own bucket
    emb = make_client(rate_limit_tokens_per_min=100)
    assert (await emb.post("/v1/embeddings", {"input": "x" * 150})).status_code == 200  # 151 tokens used
    await error_of(await emb.post("/v1/embeddings", {"input": "x"}), 429)
