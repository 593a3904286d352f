"""KV cache types side by side: bytes, logits deviation from the f32 KV, decode speed at a long context.

    PYTHONPATH=. .venv/bin/python benchmarks/kv_cache.py [--model GGUF_OR_MODELC] [--ctx 2048] [--steps 16]
        [--threads 1] [--deviation-model PATH] [--json]

- bytes: KVPages.nbytes per type for the measured model's shape (ratio to f32).
- deviation: logits of one 1024-token random sequence (scratch forward, every position) with each KV
  type against the f32 KV: max |d| / max |logit|, mean cosine, top-1 agreement (default model: the
  tiny-llama F32 GGUF fixture in ../shared, random weights).
- decode: the KV is filled with random rows for positions 0..ctx-1 (a prefill of 2k tokens would
  dominate the run), then `steps` single-token decode steps run at positions ctx.. through the
  Runner; median ms/token per type, the types interleaved round-robin so machine noise hits all.
  Also the attention kernels alone (one layer, the model's H/K/D) at that context.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import time

import numpy as np

from modelc.api.engine import Engine
from modelc.cache.kv_pages import BLOCK_SIZE, KVPages
from modelc.engine.runner import Runner
from modelc.kernels.attention import attention
from modelc.kernels.attention.kv_write import write_pages
from modelc.request import SamplingParams
from modelc.scheduler.batch import BatchPlan, SeqChunk
from modelc.source import open_model

TYPES = ("float32", "float16", "q8_0", "mixed")
FIXTURE = pathlib.Path(__file__).resolve().parents[2] / "shared/fixtures/models/tiny-llama/gguf/tiny-llama-F32.gguf"


def deviation(path: str, n: int = 1024) -> dict:
    src = open_model(path)
    ids = np.random.default_rng(0).integers(3, int(src.config["vocab_size"]), n)
    ref = Engine(src, kv_dtype="float32").logits(ids).astype(np.float64)  # (T, V)
    out = {}
    for t in TYPES[1:]:
        got = Engine(src, kv_dtype=t).logits(ids).astype(np.float64)
        cos = (got * ref).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(ref, axis=1)
        out[t] = {"max_abs_rel": float(np.abs(got - ref).max() / np.abs(ref).max()),
                  "mean_cosine": float(cos.mean()), "min_cosine": float(cos.min()),
                  "top1_agree": float((got.argmax(1) == ref.argmax(1)).mean())}  # fmt: skip
    return out


def _filled_runner(src, t: str, ctx: int, threads: int) -> Runner:
    runner = Runner(src, num_kv_blocks=ctx // BLOCK_SIZE + 4, kv_dtype=t, threads=threads)
    rng = np.random.default_rng(1)
    kv = runner.kv
    slots = np.arange(ctx, dtype=np.int64)
    table = np.arange(kv.num_blocks, dtype=np.int32)
    kv.prepare(slots, [(table, 0, ctx)])
    for layer in range(kv.num_layers):
        k = rng.standard_normal((ctx, kv.num_kv_heads, kv.head_dim)).astype(np.float32)
        write_pages(*kv.layer(layer), k, k[::-1].copy(), slots)
    kv.retire(table, ctx)
    return runner


def decode_speed(path: str, ctx: int, steps: int, threads: int) -> dict:
    src = open_model(path)
    runners = {t: _filled_runner(src, t, ctx, threads) for t in TYPES}
    p = SamplingParams(temperature=0.0, max_tokens=steps + 2, ignore_eos=True)
    times: dict[str, list[float]] = {t: [] for t in TYPES}
    for r in runners.values():  # compile / warm
        table = np.arange(r.kv.num_blocks, dtype=np.int32)
        r.execute(BatchPlan(0, (SeqChunk(1, np.array([5], np.int32), ctx, table, True, p, ctx, 0, is_new=True),)))
    for i in range(steps):
        for t, r in runners.items():
            table = np.arange(r.kv.num_blocks, dtype=np.int32)
            c = SeqChunk(1, np.array([5 + i], np.int32), ctx + 1 + i, table, True, p, ctx, i + 1)
            t0 = time.perf_counter()
            res = r.execute(BatchPlan(i + 1, (c,)))
            times[t].append(time.perf_counter() - t0)
            assert res.error is None, res.error
    L, K, D = runners["float32"].model.kv_shape()
    H = int(getattr(getattr(runners["float32"].model, "args", None), "num_heads", K))
    return {"ms_per_token": {t: statistics.median(v) * 1e3 for t, v in times.items()},
            "attention_ms_per_layer": attention_speed(H, K, D, ctx),
            "kv_mb": {t: r.kv.nbytes / 2**20 for t, r in runners.items()},
            "shape": {"layers": L, "heads": H, "kv_heads": K, "head_dim": D}}  # fmt: skip


def attention_speed(H: int, K: int, D: int, ctx: int, reps: int = 15) -> dict:
    rng = np.random.default_rng(2)
    slots = np.arange(ctx, dtype=np.int64)
    kvs = {}
    for t in TYPES:
        kv = KVPages(1, ctx // BLOCK_SIZE + 1, K, D, t)
        table = np.arange(kv.num_blocks, dtype=np.int32)
        kv.prepare(slots, [(table, 0, ctx)])
        x = rng.standard_normal((ctx, K, D)).astype(np.float32)
        write_pages(*kv.layer(0), x, x, slots)
        kv.retire(table, ctx)
        kvs[t] = kv
    bt = np.arange(ctx // BLOCK_SIZE + 1, dtype=np.int32)[None]
    q = rng.standard_normal((1, H, D)).astype(np.float32)
    out = np.empty_like(q)
    qs, ps = np.array([0, 1], np.int32), np.array([ctx - 1], np.int32)
    times: dict[str, list[float]] = {t: [] for t in TYPES}
    for kv in kvs.values():
        attention.paged_attention_auto(out, q, *kv.layer(0), bt, qs, ps, 0.125, 0)
    for _ in range(reps):
        for t, kv in kvs.items():
            t0 = time.perf_counter()
            attention.paged_attention_auto(out, q, *kv.layer(0), bt, qs, ps, 0.125, 0)
            times[t].append(time.perf_counter() - t0)
    return {t: statistics.median(v) * 1e3 for t, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="model for the decode measurement (e.g. a TinyLlama-shaped GGUF)")
    ap.add_argument("--deviation-model", default=str(FIXTURE))
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    from modelc.kernels.runtime.threads import set_compute_threads

    set_compute_threads(a.threads)
    res: dict = {"load_avg_before": list(os.getloadavg()), "threads": a.threads, "ctx": a.ctx}
    L, K, D = 22, 4, 64  # TinyLlama-1.1B
    f32 = KVPages.bytes_per_block(L, K, D, "float32")
    res["bytes_ratio_tinyllama"] = {t: KVPages.bytes_per_block(L, K, D, t) / f32 for t in TYPES}
    if a.deviation_model and pathlib.Path(a.deviation_model).exists():
        res["deviation"] = deviation(a.deviation_model)
    if a.model:
        res["decode"] = decode_speed(a.model, a.ctx, a.steps, a.threads)
    res["load_avg_after"] = list(os.getloadavg())
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
