"""Restarts of one model with its caches populated, this checkout against another source tree, interleaved.

    .venv/bin/python benchmarks/restarts.py [MODEL] --base TREE [--rounds 5] [--tokens 32] [--dir /tmp]

TREE: another checkout of modelc (`git worktree add`, or `git archive REV | tar -x -C TREE`), run from this
checkout's Python with PYTHONPATH=TREE. One cold start of this checkout fills the caches (kernels, repacked
weights, warm list, thread choice) in a temporary HOME; then each round restarts the model once per tree, in
turn and in reverse order every other round, with benchmarks/first_run.py's `one_start` (greedy streamed
requests from the first /health 200). Both trees load the same compiled kernels where their modelc/kernels
are the same (modelc/kernels/runtime/jit_cache.py); `compiled` says whether a restart compiled anything.
Prints one JSON line per restart and, per tree, the medians of: first_frac (the first request's decode tok/s
over the median of the last 3), ready_s (/health 200), first_token_s, the first request's and the later
ones' server CPU ms per token, rss_mb. MODEL: a GGUF or artifact path (default: SmolLM2-135M Q4_1, see
first_run.py).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import first_run  # noqa: E402 - the sibling benchmark, by path

KEYS = ("ready_s", "cpu_s_at_ready", "first_token_s", "first_tok_s", "warm_tok_s", "first_frac", "speeds",
        "cpu_ms_tok", "compiled", "rss_mb")  # fmt: skip


def summary(runs: list[dict]) -> dict:
    ok = [r for r in runs if "first_frac" in r]

    def med(f) -> float | None:
        return round(statistics.median(f(r) for r in ok), 3) if ok else None

    return {"restarts": len(runs), "first_frac": med(lambda r: r["first_frac"]),
            "first_frac_each": [round(r["first_frac"], 2) for r in ok], "ready_s": med(lambda r: r["ready_s"]),
            "first_token_s": med(lambda r: r["first_token_s"]), "first_cpu_ms_tok": med(lambda r: r["cpu_ms_tok"][0]),
            "later_cpu_ms_tok": med(lambda r: statistics.median(r["cpu_ms_tok"][1:])),
            "rss_mb": med(lambda r: r["rss_mb"]), "compiled": sum(r.get("compiled", 0) for r in runs)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default=str(first_run.SMOLLM2))
    ap.add_argument("--base", required=True, help="the other source tree (a modelc checkout)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    a = ap.parse_args()
    trees = {"this": str(first_run.ROOT), "base": str(pathlib.Path(a.base).resolve())}
    if not (pathlib.Path(trees["base"]) / "modelc").is_dir():
        raise SystemExit(f"--base {a.base}: no modelc package there")
    home = pathlib.Path(tempfile.mkdtemp(prefix="modelc-restarts-", dir=a.dir))
    try:
        cache = home / ".cache"
        cache.mkdir()
        # bytecode as an install has it (see first_run.py)
        for tree in trees.values():
            subprocess.run([sys.executable, "-m", "compileall", "-q", f"{tree}/modelc"], check=True,
                           stdout=subprocess.DEVNULL)  # fmt: skip
        base_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "NUMBA_CACHE_DIR")}
        base_env.update(HOME=str(home), XDG_CACHE_HOME=str(cache), MODELC_HOME=str(home / ".modelc"))
        log = home / "server.log"
        print(json.dumps({"load_avg_before": os.getloadavg(), "cpus": os.cpu_count()}), flush=True)
        cold = first_run.one_start(a.model, {**base_env, "PYTHONPATH": trees["this"]}, log, cache, a.tokens)
        print(json.dumps({"cold": {k: cold.get(k) for k in ("ready_s", "full_speed_s", "compiled")}}), flush=True)
        runs: dict[str, list[dict]] = {name: [] for name in trees}
        for r in range(a.rounds):
            for name in list(trees)[:: 1 if r % 2 == 0 else -1]:
                load = os.getloadavg()
                got = first_run.one_start(a.model, {**base_env, "PYTHONPATH": trees[name]}, log, cache, a.tokens, 300)
                runs[name].append(got)
                print(json.dumps({"round": r, "tree": name, "load_avg": load, **{k: got.get(k) for k in KEYS}}),
                      flush=True)  # fmt: skip
        for name, got in runs.items():
            print(json.dumps({"tree": name, "path": trees[name], **summary(got)}), flush=True)
        print(json.dumps({"load_avg_after": os.getloadavg()}), flush=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
