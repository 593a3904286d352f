"""Decode rate of N concurrent sequences with and without LoRA adapters among them, for one checkout (run it
once per checkout, alternating, to compare two side by side).

    PYTHONPATH=CHECKOUT python benchmarks/lora_mix.py MODEL [--streams 8] [--gen 48] [--rounds 5] [--rank 16]

AsyncEngine (the actor tree, no HTTP), one compute thread. A random rank-`rank` adapter on every layer's q/v/down
projections is written for the model, then, for each case, `streams` sequences of 16 random tokens start
together and generate `gen` tokens each; the aggregate tokens/s once every sequence has its first token,
median over --rounds:

base:        no adapter loaded, every sequence on the base model
base_loaded: the adapter loaded (global scale 0), every sequence on the base model
one_mixed:   one sequence runs the adapter (a per-request `lora` mix, or the adapter named where this
             checkout has no `lora`), the others the base model: they share its batches
all_mixed:   every sequence runs its own `lora` mix (the adapter at 0.25, 0.5, ...; skipped without `lora`)
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path

import anyio
import numpy as np
from safetensors.numpy import save_file

from modelc.api.async_engine import AsyncEngine
from modelc.config import CacheConfig, EngineConfig, SchedulerConfig
from modelc.request import SamplingParams, TokenEvent

HAS_LORA = any(f.name == "lora" for f in dataclasses.fields(SamplingParams))


def write_adapter(eng: AsyncEngine, path: Path, rank: int) -> None:
    """A random PEFT-named adapter for q, v and down of every layer (shapes from the model's config)."""
    cfg = eng.source.config
    C, F = int(cfg["hidden_size"]), int(cfg["intermediate_size"])
    H, K = int(cfg["num_attention_heads"]), int(cfg.get("num_key_value_heads") or cfg["num_attention_heads"])
    D = int(cfg.get("head_dim") or C // H)
    rng = np.random.default_rng(0)
    t = {}
    for i in range(int(cfg["num_hidden_layers"])):
        for mod, proj, out_dim, in_dim in (("self_attn", "q", H * D, C), ("self_attn", "v", K * D, C),
                                           ("mlp", "down", C, F)):  # fmt: skip
            base = f"base_model.model.model.layers.{i}.{mod}.{proj}_proj"
            t[base + ".lora_A.weight"] = (rng.standard_normal((rank, in_dim)) * 0.01).astype(np.float32)
            t[base + ".lora_B.weight"] = (rng.standard_normal((out_dim, rank)) * 0.01).astype(np.float32)
    save_file(t, str(path))


def params_for(case: str, i: int, gen: int) -> SamplingParams:
    p = SamplingParams(temperature=0.0, max_tokens=gen, ignore_eos=True)
    if case == "one_mixed" and i == 0:
        return dataclasses.replace(p, lora=(("ad", 1.0),)) if HAS_LORA else dataclasses.replace(p, adapter="ad")
    if case == "all_mixed":
        return dataclasses.replace(p, lora=(("ad", 0.25 * (i + 1)),))
    return p


async def rate(eng: AsyncEngine, case: str, streams: int, gen: int, rng: np.random.Generator) -> float:
    vocab = int(eng.tokenizer.vocab_size)
    stamps: list[list[float]] = [[] for _ in range(streams)]

    async def one(i: int, ids: list[int]) -> None:
        async for ev in eng.generate(ids, params_for(case, i, gen)):
            if isinstance(ev, TokenEvent):
                stamps[i].append(time.perf_counter())

    async with anyio.create_task_group() as tg:
        for i in range(streams):
            tg.start_soon(one, i, rng.integers(min(300, vocab // 2), vocab, 16).tolist())
    first, end = max(s[0] for s in stamps), max(s[-1] for s in stamps)
    return sum(1 for s in stamps for x in s if x > first) / (end - first)


async def run(model: str, streams: int, gen: int, rounds: int, rank: int) -> dict[str, float]:
    config = EngineConfig(threads=1, cache=CacheConfig(kv_cache_tokens=8192),
                          scheduler=SchedulerConfig(max_num_seqs=64, max_batch_tokens=512))  # fmt: skip
    rng = np.random.default_rng(5)
    out: dict[str, float] = {}
    async with AsyncEngine.open(model, config) as eng:
        await rate(eng, "base", streams, gen, rng)  # warm-up
        out["base"] = statistics.median([await rate(eng, "base", streams, gen, rng) for _ in range(rounds)])
        with tempfile.TemporaryDirectory() as tmp:
            write_adapter(eng, Path(tmp) / "ad.safetensors", rank)
            await eng.load_adapter("ad", str(Path(tmp) / "ad.safetensors"), global_=False)
        cases = ["base_loaded", "one_mixed"] + (["all_mixed"] if HAS_LORA else [])
        for case in cases:
            await rate(eng, case, streams, gen, rng)  # warm-up (the adapter's path compiles nothing; BLAS)
            out[case] = statistics.median([await rate(eng, case, streams, gen, rng) for _ in range(rounds)])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--gen", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rank", type=int, default=16)
    a = ap.parse_args()
    result = anyio.run(run, a.model, a.streams, a.gen, a.rounds, a.rank)
    print(json.dumps({"has_lora": HAS_LORA, **{k: round(v, 1) for k, v in result.items()}}))


if __name__ == "__main__":
    main()
