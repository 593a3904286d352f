"""Decode from weights moved onto huge pages against the file mapping, paired in one process.

    PYTHONPATH=. python benchmarks/hugepages_ab.py MODEL.gguf [--rounds 20] [--tokens 64] [--threads 2]

Loads the model twice, once with MODELC_HUGEPAGES=0 (the repack cache's file mapping, 4 KiB pages) and once,
from a copy of the file in a temporary folder (its own repack cache file and mapping), with
MODELC_HUGEPAGES=1 (kernels/runtime/hugepages.py moves the mapping's pages onto huge pages in the background; the
script waits for that). Each is loaded once first so that the timed load maps its repack cache, as a
second start does. Then it alternates greedy decodes of --tokens tokens between the two, swapping which
goes first each round, so both see the same moments of a noisy machine. Prints each one's tok/s (median,
best), the median of the per-round ratios, each load's time and the background move's; RSS and huge
pages of the process at the end (both models held).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import numpy as np

from modelc.api.engine import Engine
from modelc.kernels.runtime import hugepages
from modelc.models import r16_cache
from modelc.request import SamplingParams


def memory() -> dict[str, int]:
    """The process's Rss, Anonymous and AnonHugePages in MB (Linux)."""
    want = ("Rss:", "Anonymous:", "AnonHugePages:")
    try:
        with open("/proc/self/smaps_rollup") as f:
            return {ln.split()[0][:-1]: int(ln.split()[1]) >> 10 for ln in f if ln.split()[0] in want}
    except OSError:
        return {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    engines, loads = {}, {}
    tmp = tempfile.mkdtemp(prefix="modelc-hp-ab-")
    try:
        copy = shutil.copy(a.model, os.path.join(tmp, os.path.basename(a.model)))
        for flag, path in (("0", a.model), ("1", copy)):
            os.environ["MODELC_HUGEPAGES"] = flag
            Engine.load(path, threads=a.threads, kv_cache_tokens=1024)  # repacks, or maps the cache already
            r16_cache.flush(wait=True)
            t0 = time.perf_counter()
            engines[flag] = Engine.load(path, threads=a.threads, kv_cache_tokens=1024)
            loads[flag] = time.perf_counter() - t0
        t0 = time.perf_counter()
        hugepages.wait()
        moved = time.perf_counter() - t0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the mapping holds the copy's repack cache file, not the copy
    sp = SamplingParams(max_tokens=a.tokens, temperature=0.0, ignore_eos=True)
    for e in engines.values():  # compile and warm both
        list(e.generate_ids([1, 2, 3], sp))
    rate: dict[str, list[float]] = {"0": [], "1": []}
    for r in range(a.rounds):
        for flag in ("0", "1") if r % 2 == 0 else ("1", "0"):
            t0 = time.perf_counter()
            list(engines[flag].generate_ids([1], sp))
            rate[flag].append(a.tokens / (time.perf_counter() - t0))
    mapped, huge = np.array(rate["0"]), np.array(rate["1"])
    print(f"{a.model}: {a.rounds} rounds of {a.tokens} greedy tokens, {a.threads} threads")
    print(f"  file mapping: median {np.median(mapped):.2f} tok/s, best {mapped.max():.2f}; load {loads['0']:.2f} s")
    print(
        f"  huge pages:   median {np.median(huge):.2f} tok/s, best {huge.max():.2f}; load {loads['1']:.2f} s, "
        f"then {hugepages.moved_bytes() / 1e6:.0f} MB moved in the background, done {moved:.2f} s after"
    )
    print(f"  huge pages / file mapping, median of the rounds' ratios: {np.median(huge / mapped):.3f}x")
    print(f"  memory (MB, both models held): {memory()}")


if __name__ == "__main__":
    main()
