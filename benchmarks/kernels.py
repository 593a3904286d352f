"""GEMV/GEMM throughput of linear.matmul per stored type vs numpy dequantize + BLAS.

    .venv/bin/python benchmarks/kernels.py [--threads 2] [--types Q4_0,Q8_0] [--tokens 1,4,8,16,128]
        [--seconds 1.5] [--write docs/benchmarks.md]

Weights are streamed from memory: each type rotates over copies of a
TinyLlama FFN-shaped matrix (N=5632, C=2048) totalling > 384 MiB, so no matrix
is cache-resident. The baseline is ref_linear.matmul (numpy dequantize, then
np.matmul) on the same rotation. Machine load is recorded with the figures.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import re
import sys
import time

import numba
import numpy as np

from modelc.ir import DataType
from modelc.kernels.matmul import linear
from modelc.kernels.matmul.gemm_random import random_scale, random_tensor
from modelc.kernels.reference import ref_linear

N, C = 5632, 2048
ROTATE_BYTES = 400 << 20
TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "I8", "F16", "BF16", "F32"]


def _weights(name: str, rng: np.random.Generator) -> list[linear.Weight]:
    dt = DataType[name]
    t = random_tensor(dt, N, C, rng)
    s = random_scale(N, rng) if dt in (DataType.I8, DataType.I4) else None
    copies = max(2, ROTATE_BYTES // t.nbytes + 1)
    out = []
    for _ in range(copies):
        tc = type(t)(t.shape, t.dtype, t.data.copy())
        out.append(linear.prepare_weight(tc, s))
    return out


def _time(fn, ws: list[linear.Weight], x: np.ndarray, out: np.ndarray, seconds: float, min_calls: int) -> float:
    """Seconds per call, rotating over ws, after one warm-up call."""
    fn(out, x, ws[0])
    calls = 0
    t0 = time.perf_counter()
    while True:
        for w in ws:
            fn(out, x, w)
            calls += 1
        el = time.perf_counter() - t0
        if el >= seconds and calls >= min_calls:
            return el / calls


def run(types: list[str], tokens: list[int], seconds: float, baseline: bool) -> list[dict]:
    rng = np.random.default_rng(0)
    rows = []
    for name in types:
        ws = _weights(name, rng)
        nbytes = ws[0].nbytes
        for t in tokens:
            x = rng.standard_normal((t, C)).astype(np.float32)
            out = np.empty((t, N), np.float32)
            s = _time(linear.matmul, ws, x, out, seconds, min_calls=len(ws))
            b = _time(ref_linear.matmul, ws[:3], x, out, seconds / 3, min_calls=3) if baseline else float("nan")
            row = {
                "type": name,
                "T": t,
                "ms": s * 1e3,
                "GB/s": nbytes / s / 1e9,
                "GFLOP/s": 2.0 * N * C * t / s / 1e9,
                "tok/s-equiv": t / s / 154.0,  # TinyLlama-1.1B has ~154 matrices of this many weights
                "baseline_ms": b * 1e3,
                "speedup": b / s,
            }
            rows.append(row)
            print(
                f"{name:5s} T={t:4d} {row['ms']:9.3f} ms {row['GB/s']:7.2f} GB/s {row['GFLOP/s']:8.1f} GFLOP/s"
                f"  baseline {row['baseline_ms']:9.2f} ms  x{row['speedup']:6.1f}",
                flush=True,
            )
        del ws
    return rows


def _machine() -> str:
    load = os.getloadavg()
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, numba threads "
        f"{numba.get_num_threads()}, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}, "
        f"numpy {np.__version__}, numba {numba.__version__}"
    )


def to_markdown(rows: list[dict]) -> str:
    lines = [
        "## Kernels",
        "",
        f"`benchmarks/kernels.py`, matrix N={N} x C={C} (TinyLlama FFN), rotating over > 384 MiB of weights;",
        f"{_machine()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "GB/s = stored weight bytes streamed per second; tok/s-equiv = T / (time x 154 matrices of this size);",
        "baseline = numpy dequantize + np.matmul (ref_linear.matmul).",
        "",
        "| type | T | ms | GB/s | GFLOP/s | tok/s-equiv | baseline ms | speedup |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['type']} | {r['T']} | {r['ms']:.3f} | {r['GB/s']:.2f} | {r['GFLOP/s']:.1f} | "
            f"{r['tok/s-equiv']:.1f} | {r['baseline_ms']:.2f} | {r['speedup']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def write_section(path: pathlib.Path, section: str, heading: str = "## Kernels") -> None:
    """Replace (or append) the `heading` section of path, leaving other sections alone."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    pat = re.compile("^" + re.escape(heading) + r"\n.*?(?=^## |\Z)", re.S | re.M)
    if pat.search(text):
        text = pat.sub(lambda _m: section + "\n", text)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=numba.get_num_threads())
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--tokens", default="1,4,8,16,128")
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--write", type=pathlib.Path, default=None, help="markdown file to put the table in")
    a = ap.parse_args(argv)
    numba.set_num_threads(a.threads)
    print(_machine(), flush=True)
    rows = run(a.types.split(","), [int(t) for t in a.tokens.split(",")], a.seconds, not a.no_baseline)
    if a.write:
        write_section(a.write, to_markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
