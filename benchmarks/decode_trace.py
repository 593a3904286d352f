"""Per-step decode trace: each greedy step's wall time and the thread count the thread tuner gave it, one stream.

    PYTHONPATH=. .venv/bin/python benchmarks/decode_trace.py MODEL.gguf [--prompt-tokens 512] [--tokens 32]
        [--threads 2] [--no-wait]

Loads the model, waits for the weights' move onto huge pages (as the benchmarks do; --no-wait: not), prefills the
prompt, then prints every step: its index, ms, threads, and whether it was one of a thread-count probe's steps
(threads below the configured count, or a probe planned). Ends with the mean and the median step and the tok/s of
each, the steps on each thread count, and the /proc/loadavg runnable count seen at each probe's start. Tells a
slow step of the tuner's (a probe on half the threads) from a slow step on every thread (the machine, page faults).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import modelc  # noqa: F401  (before numpy and numba, as in the CLI: its thread settings apply only then)

# isort: split
import numpy as np

from modelc.api.engine import Engine
from modelc.engine import thread_tuner
from modelc.request import SamplingParams


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-wait", action="store_true")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    eng = Engine.load(a.model, threads=a.threads, kv_cache_tokens=a.prompt_tokens + a.tokens + 64)
    print(f"load {time.perf_counter() - t0:.1f} s", flush=True)
    if not a.no_wait:
        from modelc.kernels.runtime import hugepages

        t0 = time.perf_counter()
        hugepages.wait()
        print(f"huge pages moved in {time.perf_counter() - t0:.1f} s", flush=True)
    tuner = eng.runner.tuner
    steps: list[tuple[float, int, bool, str]] = []
    real_threads_for, real_record = tuner.threads_for, tuner.record
    planned = {"probe": False}

    def threads_for(key):
        n = real_threads_for(key)
        st = tuner._keys.get(key)
        planned["probe"] = bool(st is not None and st.plan)
        return n

    def record(key, threads, seconds):
        with open(thread_tuner.LOADAVG) as f:
            load = f.read().split()[3]
        steps.append((seconds, threads, planned["probe"], load))
        real_record(key, threads, seconds)

    tuner.threads_for, tuner.record = threads_for, record
    ids = [1, *np.random.default_rng(0).integers(100, eng.runner.vocab_size, a.prompt_tokens - 1).tolist()]
    it = eng.generate_ids(ids, SamplingParams(max_tokens=a.tokens + 1, temperature=0.0, ignore_eos=True))
    t0 = time.perf_counter()
    next(it)
    print(f"prefill {a.prompt_tokens / (time.perf_counter() - t0):.1f} tok/s", flush=True)
    t0 = time.perf_counter()
    n = sum(1 for _ in it)
    wall = time.perf_counter() - t0
    for i, (s, th, probe, load) in enumerate(steps):
        print(f"step {i:3d} {1e3 * s:8.1f} ms  threads {th}{'  probe' if probe else ''}  runnable {load}")
    ts = [s for s, _, _, _ in steps]
    print(f"{n} tokens in {wall:.2f} s: {n / wall:.2f} tok/s; steps mean {1e3 * statistics.mean(ts):.1f} ms "
          f"({1 / statistics.mean(ts):.2f} tok/s), median {1e3 * statistics.median(ts):.1f} ms "
          f"({1 / statistics.median(ts):.2f} tok/s)")  # fmt: skip
    for th in sorted({t for _, t, _, _ in steps}):
        mine = [s for s, t, _, _ in steps if t == th]
        print(f"  {len(mine)} steps on {th} thread(s), median {1e3 * statistics.median(mine):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
