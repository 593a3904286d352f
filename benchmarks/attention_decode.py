"""Decode attention alone: one query row per layer over a context of N positions, every layer in turn, as a
decode step reads them (each layer's K/V pages come from memory, not from the layer before's cache lines).

    PYTHONPATH=. .venv/bin/python benchmarks/attention_decode.py [--ctx 128,1024,1900] [--layers 22]
        [--heads 32 --kv-heads 4 --head-dim 64] [--kv-dtype float16] [--threads 2] [--rounds 7]

TinyLlama's shape by default. Per context: ms per token (the --layers calls of attention.paged_attention_auto,
median of the rounds) and the K/V bytes read per token over that time (GB/s). Compare two trees by running
this from each (PYTHONPATH=TREE), alternating.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numba
import numpy as np

from modelc.cache.kv_pages import BLOCK_SIZE, KVPages
from modelc.kernels.attention import attention
from modelc.kernels.attention.kv_write import write_pages


def token_ms(kv: KVPages, q: np.ndarray, ctx: int, rounds: int) -> float:
    """Median ms of one pass over every layer at position ctx - 1."""
    bt = np.arange(ctx // BLOCK_SIZE + 1, dtype=np.int32)[None]
    out = np.empty_like(q)
    qs, ps = np.array([0, 1], np.int32), np.array([ctx - 1], np.int32)
    times = []
    for r in range(rounds + 1):
        t0 = time.perf_counter()
        for layer in range(kv.num_layers):
            attention.paged_attention_auto(out, q, *kv.layer(layer), bt, qs, ps, 0.125, 0)
        if r:  # the first pass compiles or loads the kernels
            times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def filled_pages(layers: int, ctx: int, K: int, D: int, kv_dtype: str, rng: np.random.Generator) -> KVPages:
    """KV pages of `layers` layers holding random rows at positions 0 .. ctx - 1 (block table: 0, 1, 2, ...)."""
    kv = KVPages(layers, ctx // BLOCK_SIZE + 1, K, D, kv_dtype)
    slots = np.arange(ctx, dtype=np.int64)
    table = np.arange(kv.num_blocks, dtype=np.int32)
    kv.prepare(slots, [(table, 0, ctx)])
    for layer in range(layers):
        x = rng.standard_normal((ctx, K, D)).astype(np.float32)
        write_pages(*kv.layer(layer), x, x[::-1].copy(), slots)
    kv.retire(table, ctx)
    return kv


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ctx", default="128,1024,1900")
    ap.add_argument("--layers", type=int, default=22)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--kv-dtype", default="float16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args(argv)
    numba.set_num_threads(a.threads)
    rng = np.random.default_rng(0)
    H, K, D = a.heads, a.kv_heads, a.head_dim
    for ctx in (int(c) for c in a.ctx.split(",")):
        kv = filled_pages(a.layers, ctx, K, D, a.kv_dtype, rng)
        q = rng.standard_normal((1, H, D)).astype(np.float32)
        ms = token_ms(kv, q, ctx, a.rounds)
        read = kv.nbytes * ctx // (kv.num_blocks * BLOCK_SIZE)  # the K/V bytes of ctx positions, any KV type
        print(f"ctx {ctx}: {ms:.2f} ms/token ({a.layers} layers, {a.kv_dtype}, {a.threads} threads), "
              f"K/V {read / 1e6:.1f} MB at {read / ms / 1e6:.1f} GB/s", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
