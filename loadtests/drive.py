"""Drive a workload against a target: closed loop (concurrency), open loop (arrival times) or burst.

Bounded: at most len(specs) requests, and nothing is sent after `duration_s`; in-flight requests
get `timeout_s`. Targets only `target` (default loopback).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import anyio
import httpx

from loadtests.client import RequestResult, metric_total, run_one, scrape_metrics
from loadtests.stats import summarize
from loadtests.workload import RequestSpec


@dataclass(frozen=True, slots=True)
class DriveConfig:
    target: str = "http://127.0.0.1:8080"
    model: str | None = None
    api_key: str | None = None
    concurrency: int | None = 4  # closed loop; None = open loop on the specs' arrival times
    duration_s: float | None = None
    timeout_s: float = 300.0


async def drive(specs: list[RequestSpec], cfg: DriveConfig) -> dict:
    headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
    limits = httpx.Limits(max_connections=max(64, (cfg.concurrency or 0) * 2))
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
        after = await scrape_metrics(client)
    return make_report(results, wall, before, after, cfg)


def make_report(results: list[RequestResult], wall_s: float, before: dict, after: dict, cfg: DriveConfig) -> dict:
    ok = [r for r in results if r.error is None]
    errors: dict[str, int] = {}
    for r in results:
        if r.error:
            errors[r.error] = errors.get(r.error, 0) + 1
    out_tokens = sum(r.completion_tokens for r in ok)
    itl = [g for r in ok for g in r.itl_s]
    server = {}
    if before or after:
        for name in ("modelc_requests_total", "modelc_tokens_generated_total"):
            server[name] = metric_total(after, name) - metric_total(before, name)
        for name in ("modelc_kv_blocks_used", "modelc_running_requests", "modelc_waiting_requests"):
            if any(k.split("{")[0] == name for k in after):
                server[name + "_after"] = metric_total(after, name)
    return {
        "target": cfg.target,
        "concurrency": cfg.concurrency,
        "requests": len(results),
        "ok": len(ok),
        "cancelled": sum(r.cancelled for r in results),
        "errors": errors,
        "wall_s": wall_s,
        "requests_per_s": len(ok) / wall_s if wall_s else 0.0,
        "output_tokens": out_tokens,
        "output_tokens_per_s": out_tokens / wall_s if wall_s else 0.0,
        "prompt_tokens": sum(r.prompt_tokens for r in ok),
        "ttft_s": summarize([r.ttft_s for r in ok if r.ttft_s is not None]),
        "itl_s": summarize(itl),
        "e2e_s": summarize([r.e2e_s for r in ok if r.e2e_s is not None]),
        "server": server,
        "results": [r.to_json() for r in results],
    }
