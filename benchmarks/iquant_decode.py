"""T=1 decode matmuls of several TinyLlama-shaped GGUFs side by side (e.g. IQ4_XS vs Q4_K_M), rounds alternated.

    .venv/bin/python benchmarks/make_tinyllama.py /tmp/modelc-bench --types IQ4_XS,Q4_K_M
    .venv/bin/python benchmarks/iquant_decode.py /tmp/modelc-bench/tinyllama-1.1b-IQ4_XS.gguf \\
        /tmp/modelc-bench/tinyllama-1.1b-Q4_K_M.gguf [--threads 2] [--rounds 15]

One pass = linear.matmul at T=1 over every 2-D weight of a file but token_embd (activation
quantization and dispatch included: what one decode token's matmuls cost), the files taking
turns round by round so machine noise hits them alike. Reported per file: median tok/s of
matmuls alone, weight GB/s, and the ratio to the first file. The load average is printed.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys

import numba
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from decode_kernels import load_weights, make_calls, time_rounds  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gguf", nargs="+")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args(argv)

    from modelc.kernels.matmul import linear

    numba.set_num_threads(a.threads)
    files = {pathlib.Path(p).name: load_weights(p) for p in a.gguf}
    calls = {
        name: make_calls(ws, {"linear": "linear"}, np.random.default_rng(0))["linear"] for name, ws in files.items()
    }
    times = time_rounds(calls, a.rounds)
    load = os.getloadavg()
    print(
        f"{a.threads} threads, {a.rounds} rounds, chunk {linear.CHUNK}, load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    first = statistics.median(next(iter(times.values())))
    for name, ts in times.items():
        med = statistics.median(ts)
        nbytes = sum(w.blocks.nbytes for w in files[name])
        print(
            f"  {name:>32}: {1 / med:6.2f} tok/s  {nbytes / med / 1e9:5.1f} GB/s  "
            f"(min {1 / max(ts):.2f} max {1 / min(ts):.2f})  x{first / med:.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
