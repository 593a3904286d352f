"""Ray engine replicas, measured: prefix-cache hit rate by routing policy, the per-token cost of
the Ray hop, and failover time. Needs the ray extra; starts a local Ray cluster on 127.0.0.1.

    python benchmarks/replicas.py [--model PATH] [--requests 48] [--json OUT]

1. shared-prefix: 4 distinct 256-token prefixes, each request one of them plus a short suffix, sent
   4 at a time to 2 replicas whose KV caches hold about two prefixes each. Hit rate = prompt tokens
   served from a prefix cache / prompt tokens in full blocks after each prefix's first request.
2. ITL p50 of one stream at a time: 2 Ray replicas vs 2 in-process engines (same threads each).
3. failover: kill the replica serving a prefix; time until a request for it completes elsewhere,
   and until the killed replica has restarted, reloaded and rejoined routing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from modelc.api.async_engine import AsyncEngine  # noqa: E402
from modelc.config import CacheConfig, EngineConfig, ReplicaConfig, SchedulerConfig  # noqa: E402
from modelc.replicas.cluster import connected  # noqa: E402
from modelc.replicas.engine import ReplicaEngine  # noqa: E402
from modelc.request import SamplingParams, TokenEvent  # noqa: E402

PREFIX_TOKENS, NUM_PREFIXES, BLOCK = 256, 4, 16
POLICIES = ("affinity", "least_loaded", "random")


def workload(num_requests: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    prefixes = [[rng.randrange(3, vocab) for _ in range(PREFIX_TOKENS)] for _ in range(NUM_PREFIXES)]
    return [
        prefixes[rng.randrange(NUM_PREFIXES)] + [rng.randrange(3, vocab) for _ in range(8)] for _ in range(num_requests)
    ]


def config(policy: str, kv_mb: float) -> EngineConfig:
    return EngineConfig(
        threads=1,
        cache=CacheConfig(kv_cache_mb=kv_mb),
        scheduler=SchedulerConfig(max_num_seqs=8, max_queue=64),
        replicas=ReplicaConfig(replicas=2, cpus_per_replica=1, policy=policy),
    )


async def run_prompts(engine, prompts, params, concurrency: int) -> list[list[float]]:
    """Per request, the times its tokens arrived."""
    times: list[list[float]] = []
    limiter = anyio.Semaphore(concurrency)

    async def one(p):
        async with limiter:
            stamps = []
            async for ev in engine.generate(p, params):
                if isinstance(ev, TokenEvent):
                    stamps.append(time.perf_counter())
            times.append(stamps)

    async with anyio.create_task_group() as tg:
        for p in prompts:
            tg.start_soon(one, p)
    return times


async def hit_rates(model: str, prompts: list[list[int]], kv_mb: float) -> dict[str, float]:
    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
    firsts = {tuple(p[:PREFIX_TOKENS]) for p in prompts}
    shareable = (len(prompts) - len(firsts)) * (PREFIX_TOKENS // BLOCK) * BLOCK
    out = {}
    for policy in POLICIES:
        async with ReplicaEngine.open(model, config(policy, kv_mb)) as engine:
            await run_prompts(engine, prompts, params, concurrency=4)
            rows = [await a.stats.remote() for a in engine._actors]
        out[policy] = sum(r["prefix_hits"] for r in rows) / shareable
        print(f"hit rate {policy:12s} {out[policy]:.1%}", flush=True)
    return out


def itl_p50(times: list[list[float]]) -> float:
    gaps = [b - a for stamps in times for a, b in zip(stamps, stamps[1:], strict=False)]
    return statistics.median(gaps) * 1000


async def hop_cost(model: str, vocab: int, rounds: int = 3) -> dict[str, float]:
    params = SamplingParams(max_tokens=48, temperature=0.0, ignore_eos=True)
    rng = random.Random(1)
    prompts = [[rng.randrange(3, vocab) for _ in range(32)] for _ in range(6)]
    local_cfg = EngineConfig(engines=2, threads=1, cache=CacheConfig(kv_cache_mb=16))
    ray_ms, local_ms = [], []
    async with (
        AsyncEngine.open(model, local_cfg) as local,
        ReplicaEngine.open(model, config("least_loaded", 16)) as rep,
    ):
        for _ in range(rounds):  # interleaved, one stream at a time
            local_ms.append(itl_p50(await run_prompts(local, prompts, params, concurrency=1)))
            ray_ms.append(itl_p50(await run_prompts(rep, prompts, params, concurrency=1)))
    out = {"itl_p50_ms_in_process": statistics.median(local_ms), "itl_p50_ms_ray": statistics.median(ray_ms)}
    print(f"ITL p50: in-process {out['itl_p50_ms_in_process']:.2f} ms, Ray {out['itl_p50_ms_ray']:.2f} ms", flush=True)
    return out


async def failover(model: str, vocab: int) -> dict[str, float]:
    params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    prompt = [random.Random(2).randrange(3, vocab) for _ in range(64)]
    async with ReplicaEngine.open(model, config("affinity", 16)) as engine:
        await run_prompts(engine, [prompt], params, 1)
        owner = next(iter(engine._router._owner.values()))
        pid = await engine._actors[owner].ping.remote()
        killed = time.perf_counter()
        os.kill(pid, 9)
        await run_prompts(engine, [prompt], params, 1)
        served = time.perf_counter() - killed
        while not engine._loads[owner].healthy:
            await anyio.sleep(0.05)
        rejoined = time.perf_counter() - killed
    print(f"failover: served elsewhere after {served:.2f} s, replica rejoined after {rejoined:.1f} s", flush=True)
    return {"failover_served_s": served, "replica_rejoin_s": rejoined}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(ROOT / "modelc" / "data" / "default.modelc"))
    ap.add_argument("--requests", type=int, default=48)
    ap.add_argument("--kv-mb", type=float, default=0.0, help="KV per replica (default: about 2.5 prefixes)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    from modelc.artifact.reader import open_artifact
    from modelc.cache.budget import kv_bytes_per_block

    src = open_artifact(args.model)
    vocab = int(src.config["vocab_size"])
    # Two replicas, each with room for ~2.5 of the 4 prefixes: where they land matters.
    kv_mb = args.kv_mb or 2.5 * PREFIX_TOKENS / BLOCK * kv_bytes_per_block(src.config, BLOCK, "float32") / 2**20
    result = {"cpu": _cpu(), "model": Path(args.model).name, "requests": args.requests, "kv_mb_per_replica": kv_mb}
    async with connected(None):  # one local cluster for every measurement
        result["hit_rate"] = await hit_rates(args.model, workload(args.requests, vocab), kv_mb)
        result.update(await hop_cost(args.model, vocab))
        result.update(await failover(args.model, vocab))
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip() + f", {os.cpu_count()} vCPUs"
    return "unknown"


if __name__ == "__main__":
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    anyio.run(main)
