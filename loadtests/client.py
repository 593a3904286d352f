"""The load client: async streaming over HTTP (httpx), one RequestResult per request.

It talks only to the URL it is given; every run is bounded by a request count and a deadline.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field

import anyio
import httpx

from loadtests.workload import JSON_SCHEMA, TOOLS, RequestSpec


@dataclass(slots=True)
class RequestResult:
    index: int
    kind: str
    status: int = 0  # HTTP status; 0 = no response
    error: str | None = None  # error kind: http_4xx, http_5xx, timeout, connect, cancelled, protocol
    scheduled_s: float = 0.0  # when it was due (offset from run start)
    sent_s: float = 0.0
    ttft_s: float | None = None  # first content chunk - sent
    e2e_s: float | None = None
    itl_s: list[float] = field(default_factory=list)  # gaps between content chunks
    prompt_tokens: int = 0
    completion_tokens: int = 0
    chunks: int = 0
    cancelled: bool = False  # the client closed the stream on purpose (cancel-storm)
    finish_reason: str | None = None

    def to_json(self) -> dict:
        return asdict(self)


def request_body(spec: RequestSpec, model: str | None) -> tuple[str, dict]:
    """The endpoint path and JSON body for one spec."""
    common = {"max_tokens": spec.max_tokens, "stream": True, "stream_options": {"include_usage": True}}
    if model:
        common["model"] = model
    if spec.extra.get("ignore_eos"):
        common["ignore_eos"] = True  # fixed output lengths (modelc, vLLM and llama.cpp's server accept it)
    seed = spec.extra.get("seed", 0)
    if spec.kind in ("json_schema", "tools"):
        body = {**common, "messages": [{"role": "user", "content": spec.prompt}], "temperature": 0.0}
        if spec.kind == "json_schema":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "person", "schema": JSON_SCHEMA},
            }
        else:
            body["tools"] = TOOLS
            body["tool_choice"] = "required"
        return "/v1/chat/completions", body
    body = {**common, "prompt": spec.prompt, "temperature": 0.0 if spec.kind == "greedy" else 0.8, "seed": seed}
    return "/v1/completions", body


def _has_content(obj: dict) -> bool:
    for ch in obj.get("choices") or []:
        if ch.get("text"):
            return True
        delta = ch.get("delta") or {}
        if delta.get("content") or delta.get("tool_calls"):
            return True
    return False


async def run_one(
    client: httpx.AsyncClient, spec: RequestSpec, model: str | None, t0: float, timeout_s: float
) -> RequestResult:
    res = RequestResult(index=spec.index, kind=spec.kind, scheduled_s=spec.arrival_s)
    path, body = request_body(spec, model)
    sent = time.perf_counter()
    res.sent_s = sent - t0
    # httpx's timeout bounds each read; this bounds the whole request (a trickling stream included)
    with anyio.move_on_after(timeout_s) as scope:
        try:
            async with client.stream("POST", path, json=body, timeout=timeout_s) as resp:
                res.status = resp.status_code
                if resp.status_code >= 400:
                    await resp.aread()
                    res.error = f"http_{resp.status_code}"
                else:
                    await _read_stream(resp, spec, res, sent)
        except httpx.TimeoutException:
            res.error = "timeout"
        except httpx.ConnectError:
            res.error = "connect"
        except (httpx.HTTPError, json.JSONDecodeError) as e:
            res.error = f"protocol:{type(e).__name__}"
    if scope.cancelled_caught:
        res.error = "timeout"
    res.e2e_s = time.perf_counter() - sent
    if not res.completion_tokens:
        res.completion_tokens = res.chunks
    return res


async def _read_stream(resp: httpx.Response, spec: RequestSpec, res: RequestResult, sent: float) -> None:
    """Parse SSE chunks into `res` until [DONE], an error event, or the spec's cancel point."""
    last = None
    async for line in resp.aiter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        obj = json.loads(data)
        if "error" in obj:
            res.error = "stream_error"
            return
        for ch in obj.get("choices") or []:
            if ch.get("finish_reason"):
                res.finish_reason = ch["finish_reason"]
        usage = obj.get("usage")
        if usage:
            res.prompt_tokens = usage.get("prompt_tokens", 0)
            res.completion_tokens = usage.get("completion_tokens", 0)
        if _has_content(obj):
            now = time.perf_counter()
            if last is None:
                res.ttft_s = now - sent
            else:
                res.itl_s.append(now - last)
            last = now
            res.chunks += 1
            if spec.cancel_after_tokens is not None and res.chunks >= spec.cancel_after_tokens:
                res.cancelled = True
                return  # leaving client.stream() closes the connection: the server aborts the sequence
    res.error = "protocol:incomplete"  # the server closed the stream without [DONE]


async def scrape_metrics(client: httpx.AsyncClient) -> dict[str, float]:
    """Prometheus text from /metrics as {sample name with labels: value}; {} when unavailable."""
    try:
        r = await client.get("/metrics", timeout=10)
    except httpx.HTTPError:
        return {}
    if r.status_code != 200:
        return {}
    return parse_prometheus(r.text)


def parse_prometheus(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        try:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
        except ValueError:
            continue
    return out


def _labels(key: str) -> dict[str, str]:
    """{label: value} of a sample key such as name{a="x",b="y"} (values without commas or quotes)."""
    if "{" not in key:
        return {}
    body = key.split("{", 1)[1].rstrip("}")
    out = {}
    for part in body.split(","):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k.strip()] = v.strip().strip('"')
    return out


def metric_total(samples: dict[str, float], name: str, **labels: str | tuple[str, ...]) -> float:
    """Sum of the samples of a metric whose labels match (a value or a tuple of allowed values);
    every label set when none are given; 0 when absent."""
    total = 0.0
    for key, v in samples.items():
        if key.split("{", 1)[0] != name:
            continue
        have = _labels(key)
        if all(have.get(k) in (want if isinstance(want, tuple) else (want,)) for k, want in labels.items()):
            total += v
    return total


def has_metric(samples: dict[str, float], name: str) -> bool:
    return any(key.split("{", 1)[0] == name for key in samples)
