"""Where a one-stream decode step's time goes against the bytes it reads: the whole step, then the same matmuls alone.

    PYTHONPATH=. .venv/bin/python benchmarks/decode_breakdown.py MODEL.gguf [--tokens 32] [--threads 2] [--passes 3]

1. The step: --tokens greedy steps after a 64-token prompt (after the weights' move onto huge pages), median ms.
2. The matmuls alone: every matmul a decode step runs, in the model's order (each layer's q|k|v runs, o, gate|up
   runs, down, from the decode layers' plans (models/llama_decode.py), then the output head), each called as the
   decode layer calls it (gemm_r16's entry of its kind, one token, numba's static split), timed one by one over
   --passes passes; per (matmul, type, shape): ms a token and GB/s of its weight bytes; their sum.
3. The 2-thread read probe (compare_llamacpp's), and each figure as a fraction of it.

step - matmuls alone = everything else a step does (norms, RoPE, attention, the layer's glue, the output's sampling)
plus what the matmuls lose inside the step (thread wake-ups between kernels, the caches' state). Models whose decode
layers run gemm_r16 (every projection repacked); other paths are counted as "not timed".
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import statistics
import sys
import time

import modelc  # noqa: F401  (before numpy and numba, as in the CLI: its thread settings apply only then)

# isort: split
import numba
import numpy as np

from modelc.api.engine import Engine
from modelc.kernels.layer import decode_layer
from modelc.kernels.matmul import gemm_r16, linear
from modelc.kernels.quant import quant
from modelc.request import SamplingParams

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from compare_llamacpp import memory_bandwidth  # noqa: E402


def _runs(p) -> list[tuple[str, np.ndarray, int, int]]:
    """(name, array, kind, how) of each matmul of a decode layer's plan."""
    q, o = p.qkv, p.out
    got = [("qkv", q[0], q[1], q[2]), ("qkv", q[4], q[5], q[6]), ("qkv", q[8], q[9], q[10]), ("o", o[0], o[1], o[2])]
    if p.mlp is not None and p.down is not None:
        m, d = p.mlp, p.down
        got += [("gate|up", m[0], m[1], m[2]), ("gate|up", m[4], m[5], m[6]), ("down", d[0], d[1], d[2])]
    return [g for g in got if g[3] != decode_layer.NONE]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--passes", type=int, default=3)
    a = ap.parse_args(argv)
    eng = Engine.load(a.model, threads=a.threads, kv_cache_tokens=512)
    from modelc.kernels.runtime import hugepages

    hugepages.wait()
    model = eng.runner.model
    steps: list[float] = []
    real_record = eng.runner.tuner.record

    def record(key, threads, seconds):
        steps.append(seconds)
        real_record(key, threads, seconds)

    eng.runner.tuner.record = record
    ids = [1, *np.random.default_rng(0).integers(100, eng.runner.vocab_size, 63).tolist()]
    list(eng.generate_ids(ids, SamplingParams(max_tokens=a.tokens + 1, temperature=0.0, ignore_eos=True)))
    step = statistics.median(steps)
    print(f"step: median {1e3 * step:.1f} ms ({1 / step:.2f} tok/s), mean {1e3 * statistics.mean(steps):.1f} ms, "
          f"{len(steps)} steps", flush=True)  # fmt: skip

    numba.set_num_threads(a.threads)
    plans = model.decode.plans if model.decode is not None else []
    calls: list[tuple[str, object, np.ndarray, np.ndarray, int]] = []  # (label, fn, x, out, bytes)
    untimed = 0
    names = {k: dt.name for dt, k in quant.KIND.items()}
    for p in plans:
        if p is None:
            continue
        for name, w, kind, how in _runs(p):
            if how != decode_layer.R16:
                untimed += w.nbytes
                continue
            rows = w.shape[0] * 16
            cols = w.shape[1] // gemm_r16.BYTES[kind] * gemm_r16._ELEMS[kind]
            label = f"{name} {names.get(kind, kind)} {rows}x{cols}"
            x = np.random.default_rng(len(calls)).standard_normal((1, cols)).astype(np.float32)
            calls.append((label, gemm_r16.F32_OF_KIND[kind], x, np.empty((1, rows), np.float32), w))
    head = model.lm_head
    hx = np.random.default_rng(1).standard_normal((1, head.cols)).astype(np.float32)
    head_out = np.empty((1, head.rows), np.float32)
    acc: dict[str, float] = collections.defaultdict(float)
    nbytes: dict[str, int] = collections.defaultdict(int)
    for r in range(a.passes + 1):
        for label, fn, x, out, w in calls:
            t0 = time.perf_counter()
            fn(out, x, w)
            if r:
                acc[label] += time.perf_counter() - t0
                nbytes[label] += w.nbytes
        t0 = time.perf_counter()
        linear.matmul(head_out, hx, head)
        if r:
            label = f"output {head.dtype.name} {head.rows}x{head.cols}"
            acc[label] += time.perf_counter() - t0
            nbytes[label] += head.nbytes
    probe = memory_bandwidth(a.threads)
    total = sum(acc.values()) / a.passes
    total_bytes = sum(nbytes.values()) / a.passes
    print(f"read probe ({a.threads} threads): {probe / 1e9:.1f} GB/s; weights read a step {total_bytes / 1e6:.0f} MB "
          f"(+ {untimed / 1e6:.0f} MB not timed): at the probe {1e3 * total_bytes / probe:.1f} ms")  # fmt: skip
    print(f"matmuls alone: {1e3 * total:.1f} ms a token ({total_bytes / total / 1e9:.1f} GB/s, "
          f"{100 * total_bytes / total / probe:.0f}% of the probe); the step: {1e3 * step:.1f} ms "
          f"({total_bytes / step / 1e9:.1f} GB/s, {100 * total_bytes / step / probe:.0f}%); "
          f"step - matmuls {1e3 * (step - total):.1f} ms")  # fmt: skip
    for label in sorted(acc, key=lambda k: -acc[k]):
        s, b = acc[label] / a.passes, nbytes[label] / a.passes
        print(f"  {label:32s} {1e3 * s:8.2f} ms {b / 1e6:8.0f} MB {b / s / 1e9:6.1f} GB/s {100 * b / s / probe:4.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
