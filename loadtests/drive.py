"""Drive a workload against a target: closed loop (concurrency), open loop (arrival times) or burst.

Bounded: at most len(specs) requests, and nothing is sent after `duration_s`; in-flight requests
get `timeout_s`. Targets only `target` (default loopback). Before the last /metrics scrape it waits
(at most `settle_s`) for a modelc server to go idle, so counters and gauges are final.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import anyio
import httpx

from loadtests.client import RequestResult, has_metric, metric_total, run_one, scrape_metrics
from loadtests.stats import decode_tokens_per_s, summarize
from loadtests.workload import RequestSpec

INFERENCE_ROUTES = ("/v1/completions", "/v1/chat/completions")
# modelc's gauges (modelc/server/metrics.py) reported as <name>_after in the report's "server" block.
GAUGES = ("modelc_kv_blocks_used", "modelc_num_requests_running", "modelc_num_requests_waiting",
          "modelc_active_requests")  # fmt: skip
IDLE_GAUGES = ("modelc_active_requests", "modelc_num_requests_running", "modelc_num_requests_waiting")


@dataclass(frozen=True, slots=True)
class DriveConfig:
    target: str = "http://127.0.0.1:8080"
    model: str | None = None
    api_key: str | None = None
    concurrency: int | None = 4  # closed loop; None = open loop on the specs' arrival times
    duration_s: float | None = None
    timeout_s: float = 300.0
    settle_s: float = 10.0  # wait this long at most for the server to report idle before the last scrape


async def drive(specs: list[RequestSpec], cfg: DriveConfig) -> dict:
    headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
    limits = httpx.Limits(max_connections=max(64, (cfg.concurrency or len(specs)) * 2))
    async with httpx.AsyncClient(base_url=cfg.target, headers=headers, limits=limits, timeout=cfg.timeout_s) as client:
        before = await scrape_metrics(client)
        results: list[RequestResult] = []
        t0 = time.perf_counter()
        deadline = t0 + cfg.duration_s if cfg.duration_s else None

        async def one(spec: RequestSpec) -> None:
            results.append(await run_one(client, spec, cfg.model, t0, cfg.timeout_s))

        async with anyio.create_task_group() as tg:
            if cfg.concurrency:
                queue = list(specs)

                async def worker() -> None:
                    while queue:
                        if deadline and time.perf_counter() >= deadline:
                            return
                        await one(queue.pop(0))

                for _ in range(min(cfg.concurrency, len(specs))):
                    tg.start_soon(worker)
            else:
                for spec in specs:
                    wait = t0 + spec.arrival_s - time.perf_counter()
                    if wait > 0:
                        await anyio.sleep(wait)
                    if deadline and time.perf_counter() >= deadline:
                        break
                    tg.start_soon(one, spec)
        wall = time.perf_counter() - t0
        after = await settled_metrics(client, before, cfg.settle_s)
    results.sort(key=lambda r: r.index)
    return make_report(results, wall, before, after, cfg)


async def settled_metrics(client: httpx.AsyncClient, before: dict, settle_s: float) -> dict[str, float]:
    """Scrape /metrics until a modelc server reports nothing in flight (or settle_s passes).

    A client sees [DONE] before the server's stream generator has run its `finally` (which
    counts the request and releases its slot), and an aborted sequence frees its KV blocks a
    step later, so an immediate scrape can be one request short."""
    after = await scrape_metrics(client)
    if not before and not after:
        return after
    end = time.perf_counter() + settle_s
    while any(metric_total(after, g) > 0 for g in IDLE_GAUGES if has_metric(after, g)):
        if time.perf_counter() >= end:
            break
        await anyio.sleep(0.05)
        after = await scrape_metrics(client)
    return after


def server_deltas(before: dict, after: dict) -> dict[str, float]:
    """What a modelc server counted during the run (inference routes only) and its gauges after it."""
    server: dict[str, float] = {}
    if not (before or after):
        return server
    routes = {"route": INFERENCE_ROUTES}
    server["modelc_requests_total"] = metric_total(after, "modelc_requests_total", **routes) - metric_total(
        before, "modelc_requests_total", **routes
    )
    for name in ("modelc_tokens_generated_total", "modelc_prompt_tokens_total"):
        server[name] = metric_total(after, name) - metric_total(before, name)
    for name in GAUGES:
        if has_metric(after, name):
            server[name + "_after"] = metric_total(after, name)
    return server


def make_report(results: list[RequestResult], wall_s: float, before: dict, after: dict, cfg: DriveConfig) -> dict:
    """One run's figures. `ok` = no error (cancelled streams included); `completed` = ok and read to
    the end; output_tokens counts every token received (a cancelled stream's chunks included)."""
    ok = [r for r in results if r.error is None]
    completed = [r for r in ok if not r.cancelled]
    errors: dict[str, int] = {}
    for r in results:
        if r.error:
            errors[r.error] = errors.get(r.error, 0) + 1
    out_tokens = sum(r.completion_tokens for r in ok)
    itl = [g for r in ok for g in r.itl_s]
    rows = [r.to_json() for r in results]
    return {
        "target": cfg.target,
        "concurrency": cfg.concurrency,
        "requests": len(results),
        "ok": len(ok),
        "completed": len(completed),
        "cancelled": sum(r.cancelled for r in results),
        "errors": errors,
        "wall_s": wall_s,
        "requests_per_s": len(ok) / wall_s if wall_s else 0.0,
        "output_tokens": out_tokens,
        "completed_output_tokens": sum(r.completion_tokens for r in completed),
        "output_tokens_per_s": out_tokens / wall_s if wall_s else 0.0,
        "decode_tokens_per_s": decode_tokens_per_s(rows),
        "prompt_tokens": sum(r.prompt_tokens for r in ok),
        "ttft_s": summarize([r.ttft_s for r in ok if r.ttft_s is not None]),
        "itl_s": summarize(itl),
        "e2e_s": summarize([r.e2e_s for r in completed if r.e2e_s is not None]),
        "server": server_deltas(before, after),
        "results": rows,
    }
