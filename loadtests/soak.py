"""Soak: `python -m loadtests soak --target URL --minutes N [--pid PID]`.

N minutes of mixed traffic at a fixed concurrency: streamed completions (greedy and sampled), chat
with a JSON schema and with required tool calls, streams the client cancels early, and embeddings.
Every 10 s it samples the server's RSS and open files (/proc/PID, when --pid is given and local),
KV blocks in use (/metrics), and the window's request count, 5xx count and p99 latency. The report
(JSON) holds the samples and the verdicts the issue asks for: RSS growth after warm-up, KV blocks
left in use once idle, 5xx total; the chart is an SVG (no plotting library needed).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from dataclasses import dataclass, field

import anyio
import httpx

from loadtests.client import metric_total, parse_prometheus, run_one
from loadtests.workload import RequestSpec, WorkloadConfig, build_workload

SAMPLE_EVERY_S = 10.0


@dataclass(slots=True)
class Done:
    t_s: float
    kind: str
    status: int
    e2e_s: float
    error: str | None


@dataclass(slots=True)
class Soak:
    target: str
    minutes: float
    concurrency: int = 4
    pid: int | None = None
    seed: int = 0
    embed_share: float = 0.15
    cancel_share: float = 0.2
    done: list[Done] = field(default_factory=list)
    samples: list[dict] = field(default_factory=list)


def proc_stats(pid: int | None) -> tuple[float | None, int | None]:
    """(RSS MiB, open file descriptors) of a local process, or Nones."""
    if pid is None:
        return None, None
    try:
        with open(f"/proc/{pid}/status") as f:
            rss_kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        return rss_kib / 1024.0, len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, StopIteration, ValueError):
        return None, None


async def kv_blocks_used(client: httpx.AsyncClient) -> float | None:
    try:
        text = (await client.get("/metrics", timeout=30)).text
    except httpx.HTTPError:
        return None
    samples = parse_prometheus(text)
    return metric_total(samples, "modelc_kv_blocks_used") if samples else None


def p99(values: list[float]) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(0.99 * len(v)))]


async def _embed(client: httpx.AsyncClient, rng: random.Random, t0: float) -> Done:
    texts = [" ".join(rng.choice(("alpha", "beta", "gamma", "delta")) for _ in range(rng.randint(4, 64)))]
    sent = time.perf_counter()
    try:
        r = await client.post("/v1/embeddings", json={"input": texts * rng.randint(1, 4)}, timeout=300)
        status, error = r.status_code, None if r.status_code < 400 else f"http_{r.status_code}"
    except httpx.HTTPError as e:
        status, error = 0, type(e).__name__
    now = time.perf_counter()
    return Done(now - t0, "embeddings", status, now - sent, error)


async def _worker(
    s: Soak, client: httpx.AsyncClient, specs: list[RequestSpec], wid: int, t0: float, end: float
) -> None:
    rng = random.Random(s.seed * 1000 + wid)
    while time.perf_counter() < end:
        if rng.random() < s.embed_share:
            s.done.append(await _embed(client, rng, t0))
            continue
        spec = specs[rng.randrange(len(specs))]
        if rng.random() < s.cancel_share:
            spec = RequestSpec(spec.index, spec.prompt, spec.max_tokens, 0.0, spec.kind, rng.randint(1, 3), spec.extra)
        res = await run_one(client, spec, None, t0, timeout_s=300)
        kind = spec.kind + ("+cancel" if spec.cancel_after_tokens else "")
        s.done.append(Done(time.perf_counter() - t0, kind, res.status, res.e2e_s or 0.0, res.error))


async def _sampler(s: Soak, client: httpx.AsyncClient, t0: float, end: float) -> None:
    seen = 0
    while True:
        await anyio.sleep(SAMPLE_EVERY_S)
        now = time.perf_counter()
        window = s.done[seen:]
        seen = len(s.done)
        rss, fds = proc_stats(s.pid)
        s.samples.append(
            {
                "t_s": round(now - t0, 1),
                "rss_mib": rss,
                "open_files": fds,
                "kv_blocks_used": await kv_blocks_used(client),
                "requests": len(window),
                "http_5xx": sum(1 for d in window if d.status >= 500),
                "p99_s": p99([d.e2e_s for d in window if d.error is None]),
            }
        )
        if now >= end:
            return


async def run_soak(s: Soak) -> dict:
    specs = build_workload(WorkloadConfig("mixed-sampling", num_requests=64, seed=s.seed, output_tokens=(8, 48)))
    t0 = time.perf_counter()
    end = t0 + s.minutes * 60.0
    async with httpx.AsyncClient(base_url=s.target, timeout=300) as client:
        rss0, fds0 = proc_stats(s.pid)
        async with anyio.create_task_group() as tg:
            for w in range(s.concurrency):
                tg.start_soon(_worker, s, client, specs, w, t0, end)
            tg.start_soon(_sampler, s, client, t0, end)
        await anyio.sleep(3.0)  # let aborted sequences be freed before the idle reading
        idle_kv = await kv_blocks_used(client)
    return report(s, rss0, fds0, idle_kv, time.perf_counter() - t0)


def report(s: Soak, rss0: float | None, fds0: int | None, idle_kv: float | None, wall_s: float) -> dict:
    rss = [x["rss_mib"] for x in s.samples if x["rss_mib"] is not None]
    warm = rss[min(len(rss) - 1, max(1, len(rss) // 5))] if rss else None  # after the first fifth (warm-up)
    kinds: dict[str, int] = {}
    for d in s.done:
        kinds[d.kind] = kinds.get(d.kind, 0) + 1
    return {
        "target": s.target,
        "minutes": s.minutes,
        "wall_s": round(wall_s, 1),
        "concurrency": s.concurrency,
        "requests": len(s.done),
        "by_kind": kinds,
        "http_5xx": sum(1 for d in s.done if d.status >= 500),
        "errors": sum(1 for d in s.done if d.error not in (None,) and not d.kind.endswith("+cancel")),
        "rss_start_mib": rss0,
        "rss_after_warmup_mib": warm,
        "rss_end_mib": rss[-1] if rss else None,
        "rss_growth_after_warmup_pct": round(100.0 * (rss[-1] - warm) / warm, 2) if rss and warm else None,
        "open_files_start": fds0,
        "open_files_end": s.samples[-1]["open_files"] if s.samples else None,
        "kv_blocks_used_idle": idle_kv,
        "p99_s_overall": p99([d.e2e_s for d in s.done if d.error is None]),
        "samples": s.samples,
        "load_avg": list(os.getloadavg()),
    }


def write_svg(rep: dict, path: str) -> None:
    """RSS (MiB), open files, KV blocks and p99 (s) over time: four small line charts, one SVG."""
    series = [("rss_mib", "RSS MiB"), ("open_files", "open files"), ("kv_blocks_used", "KV blocks used"),
              ("p99_s", "p99 latency s")]  # fmt: skip
    w, h, pad = 360, 160, 30
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * w}" height="{2 * h}" font-size="11">']
    ts = [x["t_s"] for x in rep["samples"]] or [0.0]
    for i, (key, label) in enumerate(series):
        ox, oy = (i % 2) * w, (i // 2) * h
        pts = [(x["t_s"], x[key]) for x in rep["samples"] if x[key] is not None]
        parts.append(f'<text x="{ox + pad}" y="{oy + 14}">{label}</text>')
        parts.append(
            f'<rect x="{ox + pad}" y="{oy + 20}" width="{w - 2 * pad}" height="{h - 50}" fill="none" stroke="#999"/>'
        )
        if not pts:
            continue
        lo, hi = min(v for _, v in pts), max(v for _, v in pts)
        span, tmax = (hi - lo) or 1.0, max(ts) or 1.0
        xy = " ".join(
            f"{ox + pad + (t / tmax) * (w - 2 * pad):.1f},{oy + h - 30 - ((v - lo) / span) * (h - 50):.1f}"
            for t, v in pts
        )
        parts.append(f'<polyline points="{xy}" fill="none" stroke="#2060c0" stroke-width="1.5"/>')
        parts.append(f'<text x="{ox + pad}" y="{oy + h - 16}">min {lo:.3g}  max {hi:.3g}  ({tmax:.0f} s)</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m loadtests soak", description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="http://127.0.0.1:8080")
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--pid", type=int, default=None, help="the server's pid (local): RSS and open files")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="soak.json")
    ap.add_argument("--chart", default=None, help="an SVG chart here")
    args = ap.parse_args(argv)
    s = Soak(args.target, args.minutes, args.concurrency, args.pid, args.seed)
    rep = anyio.run(run_soak, s)
    with open(args.out + ".tmp", "w") as f:
        json.dump(rep, f, indent=1)
    os.replace(args.out + ".tmp", args.out)
    if args.chart:
        write_svg(rep, args.chart)
    summary = {k: v for k, v in rep.items() if k not in ("samples",)}
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
