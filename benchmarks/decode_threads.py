"""Prefill and decode of one stream at a given thread count: the A/B behind engine/thread_tuner.py.

    .venv/bin/python benchmarks/decode_threads.py MODEL.gguf [--threads 1] [--kv-dtype float32] [--rounds 3]

Engine (the served path, the tuner included unless MODELC_THREAD_TUNER=0), a 128-token prompt then
32 greedy tokens, --rounds times; prints the best prefill tok/s and the best and median decode tok/s.
Run it in alternating processes (threads 1, 2, 1, 2...): one process's figure says little on a noisy host.
"""

from __future__ import annotations

import argparse
import os
import time

from modelc.api.engine import Engine
from modelc.request import SamplingParams


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-dtype", default="float32")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    import numpy as np  # after modelc, as in the CLI: its OpenBLAS setting applies only before numpy loads

    eng = Engine.load(a.model, threads=a.threads, kv_cache_tokens=512, kv_dtype=a.kv_dtype)
    ids = [1, *np.random.default_rng(0).integers(100, min(30000, eng.runner.vocab_size), 127).tolist()]
    warm = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)
    list(eng.generate_ids(ids[:8], warm))
    list(eng.generate_ids(ids[:48], warm))
    prefill, decode = [], []
    for _ in range(a.rounds):
        it = eng.generate_ids(ids, SamplingParams(max_tokens=33, temperature=0.0, ignore_eos=True))
        t0 = time.perf_counter()
        next(it)
        t1 = time.perf_counter()
        n = sum(1 for _ in it)
        t2 = time.perf_counter()
        prefill.append(len(ids) / (t1 - t0))
        decode.append(n / (t2 - t1))
    print(f"{os.path.basename(a.model)} threads={a.threads} kv={a.kv_dtype}: prefill {max(prefill):.1f} tok/s, "
          f"decode best {max(decode):.2f} median {np.median(decode):.2f} tok/s")  # fmt: skip


if __name__ == "__main__":
    main()
