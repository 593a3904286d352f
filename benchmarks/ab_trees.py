"""Two source trees of modelc side by side on one GGUF: decode, prefill and N-stream batched decode, interleaved.

    .venv/bin/python benchmarks/ab_trees.py MODEL.gguf --tree before=/tmp/modelc-base --tree after=. \
        [--rounds 3] [--threads 2] [--prompt-tokens 128] [--decode-tokens 32] [--streams 8,16] [--gen-tokens 16]
        [--vocab 32000]

Each round runs every tree once in a fresh process (PYTHONPATH=that tree, so its own numba cache),
the order alternating between rounds, so load changes on a shared machine hit both alike. Per tree:
single-sequence prefill and decode tok/s (the tree's benchmarks/compare_llamacpp.run_modelc: the
sync Engine), and the aggregate decode tok/s of N sequences started together on the AsyncEngine
(the tree's loadtests/bench_batching._engine_level) and its inter-token latency there (itl_xN_ms:
the median gap between two tokens of a stream once all N run). Prints median and best per tree and, for every
tree against the first, the ratio of the medians, the median of the per-round ratios and in how many rounds
it did no worse. Use it to check that a change costs no speed: a tree at
the commit before it (`git archive COMMIT | tar -x -C DIR`) against the working tree.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

_CHILD = r"""
import modelc  # first, as in the CLI and the server: its thread settings apply only before numpy loads
import importlib.util, json, os, sys, time
from dataclasses import replace
import anyio
tree, path, threads, n_prompt, n_decode, streams, gen, vocab = sys.argv[1:9]
threads, n_prompt, n_decode, gen, vocab = int(threads), int(n_prompt), int(n_decode), int(gen), int(vocab)
spec = importlib.util.spec_from_file_location("cmp", os.path.join(tree, "benchmarks", "compare_llamacpp.py"))
cmp = importlib.util.module_from_spec(spec); spec.loader.exec_module(cmp)
res = cmp.run_modelc(path, threads, cmp.prompt_ids(n_prompt, vocab), n_decode)
levels = tuple(int(s) for s in streams.split(",") if s)
if levels:
    try:
        from modelc.api.async_engine import AsyncEngine
    except ImportError:
        from modelc.engine.async_api import AsyncEngine
    from modelc.config import CacheConfig, EngineConfig, SchedulerConfig
    from loadtests.bench_batching import _engine_level
    cfg = EngineConfig(threads=threads, cache=CacheConfig(kv_cache_tokens=8192),
                       scheduler=replace(SchedulerConfig(), max_num_seqs=max(64, *levels)))
    src = path
    for mod in ("modelc.source", "modelc.server.daemon", "modelc.server.models"):
        try:
            src = getattr(importlib.import_module(mod), "resolve_source")(path)
            break
        except (ImportError, AttributeError):
            pass
    async def run():
        async with AsyncEngine.open(src, cfg) as eng:
            await _engine_level(eng, (2,), 16, 2)  # warm-up
            return await _engine_level(eng, levels, 16, gen)
    for r in anyio.run(run):
        res[f"decode_x{r['concurrency']}_tok_s"] = r["decode_tokens_per_s"]
        res[f"itl_x{r['concurrency']}_ms"] = 1000 * r["decode_step_p50_s"]
print("RESULT " + json.dumps(res))
"""


def run_tree(tree: str, a: argparse.Namespace) -> dict:
    # a tree whose kernels just changed compiles them in its first round: without "wait" that round would
    # serve on the hybrid kernel set while numba compiles in the background (a false slowdown)
    env = dict(os.environ, PYTHONPATH=tree)
    env.setdefault("MODELC_COLD_START", "wait")
    cmd = [sys.executable, "-c", _CHILD, tree, a.gguf, str(a.threads), str(a.prompt_tokens), str(a.decode_tokens),
           a.streams, str(a.gen_tokens), str(a.vocab)]  # fmt: skip
    p = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, timeout=3600)
    lines = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        raise SystemExit(f"{tree}: exit {p.returncode}\n{p.stderr[-3000:]}")
    return json.loads(lines[-1][7:])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gguf")
    ap.add_argument("--tree", action="append", required=True, help="NAME=PATH (two or more)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--streams", default="8,16", help="batched decode levels ('' to skip)")
    ap.add_argument("--gen-tokens", type=int, default=16, help="tokens per stream in the batched runs")
    ap.add_argument("--vocab", type=int, default=32000, help="prompt ids stay below it (the bundled model: 4101)")
    a = ap.parse_args(argv)
    trees = [t.split("=", 1) for t in a.tree]
    runs: dict[str, list[dict]] = {name: [] for name, _ in trees}
    load0 = os.getloadavg()
    for i in range(a.rounds):
        order = trees if i % 2 == 0 else trees[::-1]
        for name, path in order:
            r = run_tree(os.path.abspath(path), a)
            runs[name].append(r)
            print(f"round {i + 1} {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in r.items()), flush=True)
    keys = [k for k in runs[trees[0][0]][0] if k.endswith(("tok_s", "_ms"))]
    print(
        f"\n{a.gguf}: {a.rounds} rounds, {a.threads} threads, load average {load0[0]:.1f} -> "
        f"{os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    first, others = trees[0][0], [n for n, _ in trees[1:]]
    # per other tree: the ratio of the medians, the median of the ratios of one round (the trees of a round ran
    # side by side, so load that changes between rounds cancels there), and in how many rounds it did no worse
    print(
        "| measure | "
        + " | ".join(f"{n} median (best)" for n, _ in trees)
        + "".join(f" | {n} / {first}: medians, per round (rounds no worse)" for n in others)
        + " |"
    )
    print("|---|" + "---:|" * (len(trees) + len(others)))
    for k in keys:
        lower = k.endswith("_ms")  # itl_*_ms: the inter-token latency, lower is better
        pick = min if lower else max
        best = {n: pick(r[k] for r in runs[n]) for n, _ in trees}
        med = {n: statistics.median(r[k] for r in runs[n]) for n, _ in trees}
        cells = " | ".join(f"{med[n]:.2f} ({best[n]:.2f})" for n, _ in trees)
        for n in others:
            ratios = [a[k] / b[k] for a, b in zip(runs[n], runs[first], strict=True)]
            no_worse = sum(1 for x in ratios if (x <= 1.0 if lower else x >= 1.0))
            cells += f" | {med[n] / med[first]:.3f}x, {statistics.median(ratios):.3f}x ({no_worse} of {len(ratios)})"
        print(f"| {k} | {cells} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
