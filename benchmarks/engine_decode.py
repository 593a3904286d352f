"""Decode rate of one checkout of modelc, to compare two side by side (run it once per checkout, alternating).

    PYTHONPATH=CHECKOUT python benchmarks/engine_decode.py MODEL [--runs 15] [--gen 64] [--levels 1,8]

sync:   the sync Engine (api/engine.py), one sequence: a 128-token random prompt, then the time of `gen`
        decoded tokens; median tokens/s over --runs.
served: AsyncEngine (the actor tree, no HTTP), N sequences of 16 random tokens started together, `gen`
        tokens each: the aggregate tokens/s once every sequence has its first token; median over
        --rounds, for each N in --levels. For N = 1 also itl_ms: the median gap between two tokens.
One compute thread; prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import anyio
import numpy as np

from modelc.api.async_engine import AsyncEngine
from modelc.api.engine import Engine
from modelc.config import CacheConfig, EngineConfig, SchedulerConfig
from modelc.request import SamplingParams, TokenEvent


def sync_decode(path: str, runs: int, gen: int) -> float:
    eng = Engine.load(path, threads=1, kv_cache_tokens=1024)
    eng.runner.warmup()
    rng = np.random.default_rng(0)
    params = SamplingParams(temperature=0.0, max_tokens=gen + 1, ignore_eos=True)
    rates = []
    for _ in range(runs):
        tokens = eng.generate_ids(rng.integers(0, eng.runner.vocab_size, 128).tolist(), params)
        next(tokens)  # the prefill and the first token
        t0 = time.perf_counter()
        n = sum(1 for _ in tokens)
        rates.append(n / (time.perf_counter() - t0))
    return statistics.median(rates)


async def served_decode(path: str, levels: list[int], rounds: int, gen: int) -> dict[str, float]:
    config = EngineConfig(threads=1, cache=CacheConfig(kv_cache_tokens=8192),
                          scheduler=SchedulerConfig(max_num_seqs=64, max_batch_tokens=512))  # fmt: skip
    params = SamplingParams(temperature=0.0, max_tokens=gen, ignore_eos=True)
    rng = np.random.default_rng(5)
    out = {}
    async with AsyncEngine.open(path, config) as eng:
        vocab = int(eng.tokenizer.vocab_size)
        for n in levels:
            rates, gaps = [], []
            for _ in range(rounds):
                stamps: list[list[float]] = [[] for _ in range(n)]

                async def one(i: int, ids: list[int], stamps=stamps) -> None:
                    async for ev in eng.generate(ids, params):
                        if isinstance(ev, TokenEvent):
                            stamps[i].append(time.perf_counter())

                async with anyio.create_task_group() as tg:
                    for i in range(n):
                        tg.start_soon(one, i, rng.integers(min(300, vocab // 2), vocab, 16).tolist())
                first, end = max(s[0] for s in stamps), max(s[-1] for s in stamps)
                rates.append(sum(1 for s in stamps for x in s if x > first) / (end - first))
                gaps += np.diff(stamps[0]).tolist() if n == 1 else []
            out[f"streams_{n}"] = statistics.median(rates)
            if gaps:
                out["itl_ms"] = statistics.median(gaps) * 1000
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--levels", default="1,8")
    a = ap.parse_args()
    result = {"sync_decode_tok_s": sync_decode(a.model, a.runs, a.gen)}
    levels = [int(x) for x in a.levels.split(",")]
    result.update(anyio.run(served_decode, a.model, levels, a.rounds, a.gen))
    print(json.dumps({k: round(v, 1) for k, v in result.items()}))


if __name__ == "__main__":
    main()
