"""Prefill matmuls alone: ms per call of linear.matmul at T tokens on random weights repacked as the loader does,
per kind and shape, with the path the plan picks (AMX_R16 from plan.R16_AMX_MIN_T tokens on AMX CPUs) and gemm_r16's
kernel beside it; variants of gemm_tile_amx.K_BLOCK alternate in the same process.

    PYTHONPATH=. .venv/bin/python benchmarks/prefill_kernels.py [--cases Q4_K:4096x14336,Q6_K:4096x14336]
        [--t 512] [--threads 2] [--rounds 5] [--k-blocks 128,1000000] [--no-r16] [--bf16]

Defaults: a Llama 3 8B's matrices (q / o 4096x4096, gate / up 14336x4096, down 4096x14336; Q6_K: down and v).
Each line: the median of --rounds calls of one matrix (the weights stay in the caches where they fit; at 512 tokens
these kernels are bound by compute, not by the weight reads), rounds of the variants interleaved. --bf16 adds
gemm_tile_bf16's AMX bf16 tiles (activations rounded to bf16 inside the timed call; where cpu.HAS_AMX_BF16).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import modelc  # noqa: F401  (before numpy and numba, as in the CLI: its thread settings apply only then)

# isort: split
import numba
import numpy as np

from modelc.ir import DataType
from modelc.kernels.matmul import gemm_r16, gemm_tile_amx, linear, plan
from modelc.kernels.matmul.gemm_random import random_tensor
from modelc.kernels.quant import quant

CASES = "Q4_K:4096x4096,Q4_K:14336x4096,Q4_K:4096x14336,Q6_K:4096x14336,Q6_K:1024x4096,Q8_0:4096x14336"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=CASES)
    ap.add_argument("--t", default="512", help="token counts, comma-separated")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    k_block = getattr(gemm_tile_amx, "K_BLOCK", None)  # (a tree before K chunks has none)
    ap.add_argument("--k-blocks", default=str(k_block or ""), help="gemm_tile_amx.K_BLOCK values to compare")
    ap.add_argument("--no-r16", action="store_true", help="skip gemm_r16's kernel")
    ap.add_argument("--bf16", action="store_true", help="add gemm_tile_bf16 (AMX bf16 tiles)")
    a = ap.parse_args(argv)
    numba.set_num_threads(a.threads)
    rng = np.random.default_rng(0)
    kbs = [int(v) for v in a.k_blocks.split(",") if v] or [None]
    for case in a.cases.split(","):
        name, shape = case.split(":")
        n, c = (int(v) for v in shape.split("x"))
        dt = DataType[name]
        w = linear.prepare_weight(random_tensor(dt, n, c, rng))
        w = dataclasses.replace(w, r16=gemm_r16.repack(w.blocks, dt))
        kind = quant.KIND[dt]
        for t in (int(v) for v in a.t.split(",")):
            x = rng.standard_normal((t, c)).astype(np.float32)
            out = np.empty((t, n), np.float32)
            variants: dict[str, object] = {}
            p = plan.path(w, t)
            for kb in kbs if p is plan.Path.AMX_R16 and k_block is not None else [None]:
                variants[f"{p.value}" + (f" K_BLOCK={kb}" if kb is not None else "")] = kb
            if not a.no_r16 and p is not plan.Path.R16:
                variants["r16"] = "r16"
            if a.bf16:
                variants["bf16"] = "bf16"
            times: dict[str, list[float]] = {k: [] for k in variants}
            for r in range(a.rounds + 1):
                for label, v in variants.items():
                    if isinstance(v, int):
                        gemm_tile_amx.K_BLOCK = v
                    t0 = time.perf_counter()
                    if v == "r16":
                        gemm_r16.F32_OF_KIND[kind](out, x, w.r16)
                    elif v == "bf16":
                        from modelc.kernels.matmul import gemm_tile_bf16  # (a tree before it has none)

                        gemm_tile_bf16.qmatmul_bf16_r16(out, x, w.r16, kind)
                    else:
                        linear.matmul(out, x, w)
                    if r:  # the first round compiles / loads
                        times[label].append(time.perf_counter() - t0)
            line = "  ".join(f"{k} {1e3 * float(np.median(v)):.1f}" for k, v in times.items())
            print(f"{name} {n}x{c} T={t}: {line} (ms)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
