"""A smaller llama GGUF for serving benchmarks on a busy 2-core box: TinyLlama's layout and tokenizer,
4 layers, hidden 1024, FFN 2816, 16 heads, 4 KV heads (~110M parameters, about 1/10 of TinyLlama-1.1B).

    .venv/bin/python -m loadtests.small_llama [OUT_DIR=/tmp/modelc-bench] [--types Q4_0]

Reuses benchmarks/make_tinyllama.py (random blocks with sane scales, llama.cpp's type mix) with its
shape constants swapped for the duration of the write. Never writes into the repository.
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import sys
import time
from types import ModuleType

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHAPE = {"LAYERS": 4, "HIDDEN": 1024, "FFN": 2816, "HEADS": 16, "KV_HEADS": 4, "HEAD_DIM": 64}


def _maker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_tinyllama", ROOT / "benchmarks" / "make_tinyllama.py")
    if spec is None or spec.loader is None:
        raise SystemExit("error: benchmarks/make_tinyllama.py is missing")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def write_small(out_dir: pathlib.Path, mix: str = "Q4_0") -> pathlib.Path:
    mod = _maker()
    for k, v in SHAPE.items():
        setattr(mod, k, v)
    path = out_dir / f"small-llama-110m-{mix}.gguf"
    mod.write(path, mix)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", nargs="?", default="/tmp/modelc-bench", type=pathlib.Path)
    ap.add_argument("--types", default="Q4_0")
    a = ap.parse_args(argv)
    out_dir = a.out_dir.resolve()
    if out_dir == ROOT or ROOT in out_dir.parents:
        print("error: write benchmark models outside the repository", file=sys.stderr)
        return 1
    out_dir.mkdir(parents=True, exist_ok=True)
    for mix in a.types.split(","):
        t0 = time.perf_counter()
        path = write_small(out_dir, mix)
        print(f"{path}  {path.stat().st_size / 2**20:.0f} MiB  {time.perf_counter() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
