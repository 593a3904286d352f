"""run_one against httpx.MockTransport: SSE parsing, cancel point, whole-request timeout, errors."""

from __future__ import annotations

import json

import anyio
import httpx
import pytest

from loadtests.client import run_one
from loadtests.workload import RequestSpec

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def sse(*objs: object, done: bool = True) -> list[bytes]:
    out = [f"data: {json.dumps(o)}\n\n".encode() for o in objs]
    return out + ([b"data: [DONE]\n\n"] if done else [])


def chunk(text: str, finish: str | None = None) -> dict:
    return {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}


class Body(httpx.AsyncByteStream):
    def __init__(self, parts: list[bytes], delay_s: float = 0.0, forever: bool = False) -> None:
        self.parts, self.delay_s, self.forever, self.closed = parts, delay_s, forever, False

    async def __aiter__(self):
        for p in self.parts:
            await anyio.sleep(self.delay_s)
            yield p
        while self.forever:
            await anyio.sleep(0.05)
            yield b": keep-alive\n\n"

    async def aclose(self) -> None:
        self.closed = True


async def run(body: Body | None, spec: RequestSpec, status: int = 200, timeout_s: float = 5.0):
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/completions"
        return httpx.Response(status, stream=body or Body([b'{"error": {}}']))

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://127.0.0.1:1") as client:
        return await run_one(client, spec, None, 0.0, timeout_s)


def spec(cancel: int | None = None) -> RequestSpec:
    return RequestSpec(index=3, prompt="a b", max_tokens=8, arrival_s=0.0, cancel_after_tokens=cancel)


async def test_full_stream_usage_and_timings() -> None:
    usage = {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 4}}
    res = await run(Body(sse(chunk("a"), chunk(""), chunk("b"), chunk("c", "length"), usage), delay_s=0.01), spec())
    assert res.error is None and res.status == 200 and res.finish_reason == "length"
    assert res.chunks == 3 and res.completion_tokens == 4 and res.prompt_tokens == 2
    assert res.ttft_s > 0 and len(res.itl_s) == 2 and res.e2e_s >= res.ttft_s


async def test_cancel_closes_the_stream() -> None:
    body = Body(sse(*(chunk(str(i)) for i in range(6))), forever=True)
    res = await run(body, spec(cancel=2))
    assert res.cancelled and res.error is None and res.chunks == 2 and res.completion_tokens == 2
    assert body.closed


async def test_whole_request_timeout_and_incomplete_stream() -> None:
    with anyio.fail_after(5):
        res = await run(Body(sse(chunk("a"), done=False), forever=True), spec(), timeout_s=0.3)
    assert res.error == "timeout" and res.chunks == 1
    res = await run(Body(sse(chunk("a"), done=False)), spec())
    assert res.error == "protocol:incomplete"
    res = await run(Body(sse({"error": {"message": "boom"}})), spec())
    assert res.error == "stream_error"
    res = await run(None, spec(), status=503)
    assert res.error == "http_503" and res.status == 503
