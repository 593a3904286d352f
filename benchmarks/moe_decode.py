"""MoE decode throughput: one stream (Engine) and N concurrent streams (AsyncEngine, one batched step
for all of them), on a GGUF such as benchmarks/make_moe_model.py writes.

    .venv/bin/python benchmarks/moe_decode.py /tmp/moe/qwen3moe-8x32e4-q8_0.gguf [--streams 8] [--tokens 32]

Prints decode tok/s for 1 stream and the aggregate for --streams streams (prompt time excluded: the
clock starts at each stream's first token).
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def one_stream(path: str, prompt: list[int], n: int) -> float:
    from modelc.api.engine import Engine
    from modelc.request import SamplingParams

    eng = Engine.load(path)
    params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
    list(eng.generate_ids(prompt, SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)))  # warm up
    it = eng.generate_ids(prompt, params)
    next(it)
    t0 = time.perf_counter()
    k = sum(1 for _ in it)
    return k / (time.perf_counter() - t0)


async def many_streams(path: str, prompt: list[int], n: int, streams: int, threads: int) -> float:
    import anyio

    from modelc.api.async_engine import AsyncEngine
    from modelc.config import CacheConfig, EngineConfig, SchedulerConfig
    from modelc.formats.detect import read_model
    from modelc.request import SamplingParams, TokenEvent

    cfg = EngineConfig(
        engines=1, threads=threads, cpu_count=threads, request_timeout_s=600,
        cache=CacheConfig(kv_cache_tokens=8192), scheduler=SchedulerConfig(max_num_seqs=streams),
    )  # fmt: skip
    params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
    stamps: list[list[float]] = []

    async def one(eng, i):
        times = []
        async for ev in eng.generate([*prompt[:-1], (prompt[-1] + i) % 300], params):
            if isinstance(ev, TokenEvent):
                times.append(time.perf_counter())
        stamps.append(times)

    async with AsyncEngine.open(read_model(path), cfg) as eng:
        async with anyio.create_task_group() as tg:  # warm up
            tg.start_soon(one, eng, 99)
        stamps.clear()
        async with anyio.create_task_group() as tg:
            for i in range(streams):
                tg.start_soon(one, eng, i)
    start = max(s[0] for s in stamps)  # every stream decoding
    end = max(s[-1] for s in stamps)
    return sum(sum(1 for t in s if t > start) for s in stamps) / (end - start)


def main() -> None:
    import anyio

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("gguf")
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    prompt = list(np.random.default_rng(0).integers(4, 300, 32))
    print(f"1 stream: {one_stream(a.gguf, prompt, a.tokens):.2f} tok/s")
    agg = anyio.run(many_streams, a.gguf, prompt, a.tokens, a.streams, a.threads)
    print(f"{a.streams} streams: {agg:.2f} tok/s aggregate")


if __name__ == "__main__":
    main()
