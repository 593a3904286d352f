"""Grid i-quant / ternary decode kernels (gemm_fused_grid) vs the unpack-rows path they replace, per type.

    .venv/bin/python benchmarks/grid_kernels.py [--types IQ2_XXS,IQ3_S,...] [--tokens 1,4,8] [--threads 2] [--rounds 5]

One TinyLlama FFN-shaped matrix (N=5632, C=2048) of random valid blocks per type, rotated over copies
totalling > 200 MiB so the weights stream from memory; at each T the fused kernel
(gemm_fused_grid.qmatvec_grid) and gemm_int.qmatmul_rows take turns round by round on the same
pre-quantized activations. Reported: median ms per matmul of each, the ratio, and the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numba
import numpy as np

from modelc.ir import DataType
from modelc.kernels.matmul import gemm_fused_grid, gemm_int
from modelc.kernels.matmul.gemm_random import random_tensor
from modelc.kernels.quant import quant

N, C = 5632, 2048
TYPES = "IQ2_XXS,IQ2_XS,IQ2_S,IQ3_XXS,IQ3_S,IQ1_S,IQ1_M,TQ1_0,TQ2_0"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", default=TYPES)
    ap.add_argument("--tokens", default="1,4,8")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args(argv)
    numba.set_num_threads(a.threads)
    numba.set_parallel_chunksize(4)  # linear.CHUNK
    rng = np.random.default_rng(0)
    one = np.ones(1, np.float32)
    for name in a.types.split(","):
        dt = DataType[name]
        kind = quant.KIND[dt]
        t = random_tensor(dt, N, C, rng)
        ws = [t.data.reshape(N, -1).copy() for _ in range(max(2, (200 << 20) // t.data.nbytes))]
        for tokens in (int(v) for v in a.tokens.split(",")):
            x = rng.standard_normal((tokens, C)).astype(np.float32)
            xq = np.empty((tokens, C), np.int8)
            xd = np.empty((tokens, C // 32), np.float32)
            xs = np.empty((tokens, C // 16), np.float32)
            quant.quantize_act(xq, xd, xs, x)
            out = np.empty((tokens, N), np.float32)
            calls = {
                "fused": lambda w: gemm_fused_grid.qmatvec_grid(out, xq, xd, xs, w, kind),  # noqa: B023
                "rows": lambda w: gemm_int.qmatmul_rows(out, xq, xd, xs, w, kind, one, dt in quant.SIGNED),  # noqa: B023
            }
            times: dict[str, list[float]] = {k: [] for k in calls}
            for f in calls.values():
                f(ws[0])
            for _ in range(a.rounds):
                for k, f in calls.items():
                    t0 = time.perf_counter()
                    for w in ws:
                        f(w)
                    times[k].append((time.perf_counter() - t0) / len(ws))
            mf, mr = statistics.median(times["fused"]), statistics.median(times["rows"])
            print(
                f"{name:8s} T={tokens:<3d} fused {mf * 1e3:7.2f} ms  rows {mr * 1e3:7.2f} ms  x{mr / mf:.2f}  "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
