"""gemm_r16 kernels alone, per kind: GB/s of weight bytes streamed from memory and in cache, T tokens.

    PYTHONPATH=. .venv/bin/python benchmarks/r16_kernels.py [--kinds Q4_0,Q4_K,Q6_K,Q8_0,IQ4_XS] [--t 1]
        [--shapes 5632x2048,32000x2048] [--threads 2] [--rounds 7]

Per kind and shape (TinyLlama's gate/up and output matrices by default): a random weight repacked as the
loader does, then `gemm_r16.matmul_f32` (quantize the activations + the kernel, as linear runs it) over
copies rotating through more than 512 MiB ("stream": every call reads from memory) and over one copy
("hot": in cache where it fits the L3). Reported: T x weight bytes / median time of a call, so at T > 1
it is the effective rate. The 2-thread read bandwidth probe of compare_llamacpp is printed first.
Compare two trees by running this from each (PYTHONPATH=TREE), alternating.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numba
import numpy as np

from modelc.ir import DataType
from modelc.kernels.matmul import gemm_r16
from modelc.kernels.matmul.gemm_random import random_tensor
from modelc.kernels.quant import quant

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from compare_llamacpp import memory_bandwidth  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", default="Q4_0,Q4_K,Q6_K")
    ap.add_argument("--t", type=int, default=1)
    ap.add_argument("--shapes", default="5632x2048,32000x2048")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args(argv)
    numba.set_num_threads(a.threads)
    rng = np.random.default_rng(0)
    print(f"read bandwidth ({a.threads} threads): {memory_bandwidth(a.threads) / 1e9:.1f} GB/s", flush=True)
    for name in a.kinds.split(","):
        dt = DataType[name]
        kind = quant.KIND[dt]
        for shape in a.shapes.split(","):
            n, c = (int(v) for v in shape.split("x"))
            if not gemm_r16.can_repack(dt, n, c):
                print(f"{name} {n}x{c}: not repackable here", flush=True)
                continue
            rw = gemm_r16.repack(np.asarray(random_tensor(dt, n, c, rng).data).reshape(n, -1), dt)
            copies = [rw.copy() for _ in range((512 << 20) // rw.nbytes + 1)]
            x = rng.standard_normal((a.t, c)).astype(np.float32)
            out = np.empty((a.t, n), np.float32)
            gemm_r16.matmul_f32(out, x, rw, kind)  # compile or load
            rate = {}
            for mode in ("stream", "hot"):
                ts = []
                for _ in range(a.rounds):
                    calls = 2 * len(copies)
                    t0 = time.perf_counter()
                    for i in range(calls):
                        gemm_r16.matmul_f32(out, x, copies[i % len(copies)] if mode == "stream" else rw, kind)
                    ts.append((time.perf_counter() - t0) / calls)
                rate[mode] = a.t * rw.nbytes / float(np.median(ts)) / 1e9
            print(f"{name} {n}x{c} ({rw.nbytes / 1e6:.1f} MB) T={a.t}: stream {rate['stream']:.1f} GB/s, hot {rate['hot']:.1f} GB/s", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
