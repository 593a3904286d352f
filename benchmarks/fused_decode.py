"""Fused projections on and off in one process (models/fused.py): the same loaded model decodes with its
q/k/v and gate/up runs fused, then with each projection its own call, alternating, so both see the same
weights, memory and load. Prints ms/token of each and the median of the paired ratios.
--streams N (> 1): batched decode instead, N sequences (16-token prompts) stepping together, timed as
the model's forward over the N rows (ms per step), no sampling.

    PYTHONPATH=. python benchmarks/fused_decode.py MODEL.gguf [--pairs 12] [--threads 2] [--tokens 16] [--streams N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from modelc.api.engine import Engine
from modelc.request import SamplingParams


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--pairs", type=int, default=12)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--streams", type=int, default=1)
    a = ap.parse_args()
    eng = Engine.load(a.model, threads=a.threads, kv_cache_tokens=512)
    layers = eng.runner.model.layers
    saved = [(L.qkv, L.gate_up) for L in layers]

    def fused(on: bool) -> None:
        for L, (qkv, gate_up) in zip(layers, saved, strict=True):
            L.qkv, L.gate_up = (qkv, gate_up) if on else ((), ())

    ids = [1, *np.random.default_rng(0).integers(100, eng.runner.vocab_size, 127).tolist()]
    warm = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)
    list(eng.generate_ids(ids[:8], warm))
    list(eng.generate_ids(ids[:48], warm))

    def ms_per_token() -> float:
        if a.streams > 1:
            return ms_per_step(eng.runner.model, a.streams, a.tokens)
        it = eng.generate_ids(ids, SamplingParams(max_tokens=a.tokens + 1, temperature=0.0, ignore_eos=True))
        next(it)  # the prefill
        t0 = time.perf_counter()
        n = sum(1 for _ in it)
        return (time.perf_counter() - t0) / n * 1e3

    res: dict[bool, list[float]] = {True: [], False: []}
    for i in range(a.pairs):
        for on in (True, False) if i % 2 else (False, True):
            fused(on)
            res[on].append(ms_per_token())
    ratio = statistics.median(u / f for u, f in zip(res[False], res[True], strict=True))
    runs = sum(len(qkv) + len(gate_up) for qkv, gate_up in saved)
    unit = f"ms/step ({a.streams} streams)" if a.streams > 1 else "ms/token"
    print(f"{a.model}: {runs} fused runs; {unit} fused median {statistics.median(res[True]):.2f} "
          f"(min {min(res[True]):.2f}), unfused median {statistics.median(res[False]):.2f} "
          f"(min {min(res[False]):.2f}); paired unfused / fused median {ratio:.3f}")  # fmt: skip


def ms_per_step(model, n: int, steps: int) -> float:
    """Prefill n 16-token sequences, then time `steps` forwards of one row per sequence (greedy ids)."""
    from modelc.cache.kv_pages import BLOCK_SIZE, KVPages
    from modelc.models.batch import make_batch

    L, K, D = model.kv_shape()
    per = -(-(16 + steps) // BLOCK_SIZE)
    kv = KVPages(L, n * per + 1, K, D, "float32")
    tables = [np.arange(1 + s * per, 1 + (s + 1) * per, dtype=np.int32) for s in range(n)]
    rng = np.random.default_rng(1)
    prompts = [rng.integers(100, model.vocab_size, 16).astype(np.int32) for _ in range(n)]
    logits = model.forward(make_batch([(p, 0, t) for p, t in zip(prompts, tables, strict=True)],
                                      logit_rows=np.arange(15, 16 * n, 16)), kv)  # fmt: skip
    t0 = time.perf_counter()
    for step in range(steps):
        ids = logits.argmax(-1).astype(np.int32)
        logits = model.forward(make_batch([(ids[s : s + 1], 16 + step, tables[s]) for s in range(n)]), kv)
    return (time.perf_counter() - t0) / steps * 1e3


if __name__ == "__main__":
    main()
