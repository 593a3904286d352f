"""Single-token (T=1) matmul kernels over every weight of a TinyLlama-shaped GGUF, A/B alternated.

    .venv/bin/python benchmarks/decode_kernels.py /tmp/modelc-bench/tinyllama-1.1b-Q4_0.gguf
        [--threads 2] [--rounds 9] [--variant NAME=MODULE_OR_FILE:FUNC ...] [--no-linear]

One round calls each variant once over all 2-D weights of the file (the
matrices one decode token reads, output.weight included, token_embd excluded),
so the weights stream from memory (0.6-2.2 GB), and the variants take turns
(A B A B ...) so machine noise hits them alike. Reported: median tok/s (one
token = one pass over all weights), the weight GB/s it implies, and the ratio
to the first variant. The load average is printed with the figures.

Variants:
- `kernel` (default): the T=1 kernel linear uses for the file's type, called
  directly (gemm_fused.qmatvec / gemm_fused_k.qmatvec_k on pre-quantized activations, or
  gemm_float.hmatmul), i.e. without linear's per-call Python work;
- `linear` (default, unless --no-linear): linear.matmul, activation
  quantization and dispatch included;
- `--variant NAME=PATH:FUNC`: any function with the same signature as the
  kernel (qmatvec's `(out, xq, xd, xs, w, kind)` for quantized types,
  hmatmul's `(out, x, w, bf16)` for F16/BF16), PATH a module name or a .py
  file, e.g. an experimental kernel to compare with the current one.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pathlib
import statistics
import sys
import time

import numba
import numpy as np


def load_weights(path: str) -> list:
    """linear.Weight for every 2-D tensor of the GGUF but token_embd (mmap'd, zero-copy)."""
    import gguf

    from modelc.ir import DataType, TensorData
    from modelc.kernels.matmul import linear

    r = gguf.GGUFReader(path)
    ws = []
    for t in r.tensors:
        if len(t.shape) != 2 or t.name == "token_embd.weight":
            continue
        dt = DataType.from_ggml(int(t.tensor_type))
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        data = np.asarray(t.data).reshape(-1).view(np.uint8)
        ws.append(linear.prepare_weight(TensorData(shape, dt, data)))
    return ws


def load_func(spec: str):
    """MODULE_OR_FILE:FUNC -> the function."""
    where, _, name = spec.rpartition(":")
    if where.endswith(".py"):  # imported by its stem from its folder (numba's cache wants a real module)
        sys.path.insert(0, str(pathlib.Path(where).resolve().parent))
        where = pathlib.Path(where).stem
    mod = importlib.import_module(where)
    return getattr(mod, name)


def make_calls(ws: list, variants: dict, rng: np.random.Generator) -> dict:
    """name -> a no-argument function that runs the variant once over every weight."""
    from modelc.ir import DataType
    from modelc.kernels.matmul import gemm_float, gemm_fused, gemm_fused_iq, gemm_fused_k, linear
    from modelc.kernels.quant import quant

    xs = {}
    for w in ws:
        if w.cols not in xs:
            x = rng.standard_normal((1, w.cols)).astype(np.float32)  # (1, C)
            xq = np.empty((1, w.cols), np.int8)  # (1, C)
            xd = np.empty((1, w.cols // 32), np.float32)  # (1, C/32)
            xsum = np.empty((1, w.cols // 16), np.float32)  # (1, C/16)
            quant.quantize_act(xq, xd, xsum, x)
            xs[w.cols] = (x, xq, xd, xsum)
    outs = [np.empty((1, w.rows), np.float32) for w in ws]  # (1, N) each
    floats = (DataType.F16, DataType.BF16)

    def kernel_call(fn):
        def run():
            for w, o in zip(ws, outs, strict=True):
                x, xq, xd, xsum = xs[w.cols]
                if w.dtype in floats:
                    fn(o, x, w.blocks, w.dtype is DataType.BF16)
                else:
                    fn(o, xq, xd, xsum, w.blocks, quant.KIND[w.dtype])

        return run

    def linear_call():
        for w, o in zip(ws, outs, strict=True):
            linear.matmul(o, xs[w.cols][0], w)

    calls = {}
    for name, spec in variants.items():
        if spec == "linear":
            calls[name] = linear_call
        elif spec == "kernel":
            floaty = any(w.dtype in floats for w in ws)
            calls[name] = kernel_call(
                gemm_float.hmatmul if floaty else _t1_kernel(gemm_fused, gemm_fused_k, gemm_fused_iq)
            )
        else:
            calls[name] = kernel_call(load_func(spec))
    return calls


def time_rounds(calls: dict, rounds: int) -> dict[str, list[float]]:
    """Seconds per call per round: one warm-up call each (compile or load, touch the weights), then the
    calls take turns round by round so machine noise hits them alike."""
    for fn in calls.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(rounds):
        for name, fn in calls.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return times


def _t1_kernel(gemm_fused, gemm_fused_k, gemm_fused_iq):
    """linear's T=1 choice for quantized weights (plan.plan_matmul): qmatvec_k for the K-quants and IQ4_XS,
    qmatvec_iq for IQ4_NL/MXFP4, qmatvec for Q4_0/Q8_0."""

    def call(out, xq, xd, xs, w, kind):
        if kind in gemm_fused_k.KINDS:
            gemm_fused_k.qmatvec_k(out, xq, xd, xs, w, kind)
        elif kind in gemm_fused_iq.KINDS:
            gemm_fused_iq.qmatvec_iq(out, xq, xd, xs, w, kind)
        else:
            gemm_fused.qmatvec(out, xq, xd, xs, w, kind)

    return call


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gguf")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--variant", action="append", default=[], help="NAME=PATH:FUNC (repeatable)")
    ap.add_argument("--no-linear", action="store_true", help="leave out the linear.matmul variant")
    a = ap.parse_args(argv)

    from modelc.kernels.matmul import linear

    numba.set_num_threads(a.threads)
    numba.set_parallel_chunksize(max(0, linear.CHUNK))  # what linear.matmul runs with
    ws = load_weights(a.gguf)
    nbytes = sum(w.blocks.nbytes for w in ws)
    variants = {"kernel": "kernel"}
    if not a.no_linear:
        variants["linear"] = "linear"
    for v in a.variant:
        name, _, spec = v.partition("=")
        variants[name] = spec
    times = time_rounds(make_calls(ws, variants, np.random.default_rng(0)), a.rounds)
    load = os.getloadavg()
    print(
        f"{pathlib.Path(a.gguf).name}: {len(ws)} matrices, {nbytes / 1e9:.2f} GB, {a.threads} threads, "
        f"{a.rounds} rounds, load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    first = statistics.median(next(iter(times.values())))
    for name, ts in times.items():
        med = statistics.median(ts)
        print(
            f"  {name:>12}: {1 / med:6.2f} tok/s  {nbytes / med / 1e9:5.1f} GB/s  "
            f"(min {1 / max(ts):.2f} max {1 / min(ts):.2f})  x{first / med:.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
