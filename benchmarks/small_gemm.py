"""Small-T quantized matmul: gemm_int.qmatmul (register tiles, AMX for Q4_0) vs the unpack-rows kernel.

    .venv/bin/python benchmarks/small_gemm.py [--types Q4_0,Q8_0,Q4_K,Q6_K] [--tokens 1,2,4,8,16]
        [--threads 2] [--rounds 5] [--blas]

--blas (prefill sizes, e.g. --tokens 32,64,128,256,512): "old" is the BLAS prefill
path (gemm_blas.blas_matmul: dequantize into fp32 scratch + sgemm, float x) and
"new" is quant.quantize_act + gemm_int.qmatmul (the int8 path, AMX where present),
both timed from the same float activations; passes use max(2, 256 // T) of the
layers (compute bound there, so streaming matters less).

For each type, one TinyLlama-1.1B layer's matrices (q, k, v, o: 2048 / 256 / 256 /
2048 x 2048; gate, up: 5632 x 2048; down: 2048 x 5632) are replicated into as
many layers as exceed 384 MiB, so the weights stream from memory as in decode.
One "pass" multiplies T quantized activation rows by every matrix of every
layer; passes of the old (gemm_int.qmatmul_rows) and new (gemm_int.qmatmul: the
zmm tiles of gemm_tile, Q4_0 / Q8_0 from plan.AMX_MIN_T tokens on AMX where present)
kernels alternate in one process (A B A B ...), and the medians of wall and
CPU time (all threads) per layer are printed with the load average. Activations are quantized once, outside
the timing (both kernels take the same quant.quantize_act output).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numba
import numpy as np

from modelc.ir import DataType, TensorData
from modelc.kernels.matmul import gemm_blas, gemm_int, linear, plan
from modelc.kernels.matmul.gemm_random import random_tensor
from modelc.kernels.quant import quant
from modelc.kernels.runtime.cpu import HAS_AMX

LAYER = [(2048, 2048), (256, 2048), (256, 2048), (2048, 2048), (5632, 2048), (5632, 2048), (2048, 5632)]
ROTATE_BYTES = 384 << 20


def _layers(dt: DataType, rng: np.random.Generator) -> list[list[linear.Weight]]:
    one = [random_tensor(dt, n, c, rng) for n, c in LAYER]
    nbytes = sum(t.nbytes for t in one)
    copies = ROTATE_BYTES // nbytes + 1
    return [[linear.prepare_weight(TensorData(t.shape, t.dtype, t.data.copy())) for t in one] for _ in range(copies)]


def _acts(t: int, rng: np.random.Generator) -> dict[int, tuple[np.ndarray, ...]]:
    acts = {}
    for c in sorted({c for _, c in LAYER}):
        x = rng.standard_normal((t, c)).astype(np.float32)
        xq = np.empty((t, c), np.int8)  # (T, C)
        xd = np.empty((t, c // 32), np.float32)  # (T, C/32)
        xs = np.empty((t, c // 16), np.float32)  # (T, C/16)
        quant.quantize_act(xq, xd, xs, x)
        acts[c] = (xq, xd, xs)
        acts[-c] = x  # the float rows, for the BLAS comparison
    return acts


def _old(out, acts, w, kind):
    xq, xd, xs = acts[w.cols]
    gemm_int.qmatmul_rows(out, xq, xd, xs, w.blocks, kind, np.ones(1, np.float32), w.dtype in quant.SIGNED)


def _new(out, acts, w, kind):
    xq, xd, xs = acts[w.cols]
    gemm_int.qmatmul(out, xq, xd, xs, w.blocks, kind, np.ones(1, np.float32), w.dtype in quant.SIGNED)


def _blas(out, acts, w, kind):
    gemm_blas.blas_matmul(out, acts[-w.cols], w)


def _qact(out, acts, w, kind):
    x = acts[-w.cols]
    t, c = x.shape
    xq = np.empty((t, c), np.int8)  # (T, C)
    xd = np.empty((t, c // 32), np.float32)  # (T, C/32)
    xs = np.empty((t, c // 16), np.float32)  # (T, C/16)
    quant.quantize_act(xq, xd, xs, x)
    gemm_int.qmatmul(out, xq, xd, xs, w.blocks, kind, np.ones(1, np.float32), w.dtype in quant.SIGNED)


def _pass(fn, layers, acts, outs, kind) -> tuple[float, float]:
    """(wall, CPU) seconds per layer for one pass over all layers. The CPU time (all
    threads) is the steadier figure on a shared machine: waiting for the CPU is not in it."""
    t0, c0 = time.perf_counter(), time.process_time()
    for ws in layers:
        for w in ws:
            fn(outs[w.rows], acts, w, kind)
    return (time.perf_counter() - t0) / len(layers), (time.process_time() - c0) / len(layers)


def run(types: list[str], tokens: list[int], rounds: int, blas: bool = False) -> None:
    rng = np.random.default_rng(0)
    for name in types:
        dt = DataType[name]
        kind = quant.KIND[dt]
        layers = _layers(dt, rng)
        mib = sum(w.blocks.nbytes for ws in layers for w in ws) / 2**20
        print(f"{name}: {len(layers)} layers, {mib:.0f} MiB", flush=True)
        for t in tokens:
            acts = _acts(t, rng)
            outs = {n: np.empty((t, n), np.float32) for n, _ in LAYER}
            fo, fn, ls = (_blas, _qact, layers[: max(2, 256 // t)]) if blas else (_old, _new, layers)
            _pass(fo, layers[:1], acts, outs, kind)  # compile / warm
            _pass(fn, layers[:1], acts, outs, kind)
            old, new = [], []
            for _ in range(rounds):
                old.append(_pass(fo, ls, acts, outs, kind))
                new.append(_pass(fn, ls, acts, outs, kind))
            wo, wn = (statistics.median(p[0] for p in v) * 1e3 for v in (old, new))
            co, cn = (statistics.median(p[1] for p in v) * 1e3 for v in (old, new))
            print(
                f"  {name} T={t:3d}  wall ms/layer {'blas' if blas else 'old'} {wo:7.2f} new {wn:7.2f} x{wo / wn:5.2f}"
                f"  | CPU ms/layer old {co:7.2f} new {cn:7.2f} x{co / cn:5.2f}  (load {os.getloadavg()[0]:.2f})",
                flush=True,
            )
        del layers


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", default="Q4_0,Q8_0,Q4_K,Q6_K")
    ap.add_argument("--tokens", default="1,2,4,8,16")
    ap.add_argument("--threads", type=int, default=numba.get_num_threads())
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--blas", action="store_true", help="compare with the BLAS prefill path (gemm_blas)")
    a = ap.parse_args(argv)
    numba.set_num_threads(a.threads)
    numba.set_parallel_chunksize(linear.CHUNK)  # dynamic chunks, as linear.matmul runs them
    print(
        f"AMX {HAS_AMX} (from T, per kind: {plan.AMX_MIN_T}), threads {a.threads}, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        flush=True,
    )
    run(a.types.split(","), [int(t) for t in a.tokens.split(",")], a.rounds, a.blas)
    return 0


if __name__ == "__main__":
    sys.exit(main())
