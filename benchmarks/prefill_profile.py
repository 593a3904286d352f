"""Where a prompt's prefill time goes: every KernelSet entry of the model wrapped in a timer, the matmuls split by
(weight type, shape, kernel path), over one prompt of --prompt-tokens tokens (the engine's prefill chunks);
best of --rounds.

    PYTHONPATH=. python benchmarks/prefill_profile.py MODEL.gguf [--threads 2] [--prompt-tokens 512] [--rounds 2]

Prints seconds per prompt, calls and ms per call of each line, and the time outside the timed kernels (Python
glue, the lookup of the prompt's embeddings, sampling). A matmul line is "matmul <type> <rows>x<cols> <path>":
the shapes of a Llama 3 8B are q / o 4096x4096, k / v 1024x4096, gate / up 14336x4096, down 4096x14336.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys
import time

import modelc  # noqa: F401  (before numpy and numba, as in the CLI: its thread settings apply only then)

# isort: split
import numpy as np

from modelc.api.engine import Engine
from modelc.kernels.matmul import gemm_r16, gemm_tile_amx, plan
from modelc.kernels.quant import quant
from modelc.request import SamplingParams

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from decode_profile import acc, cnt, timed  # noqa: E402  (its timers and their totals)


def timed_matmul(f):
    def w(out, x, weight):
        key = f"matmul {weight.dtype.name} {weight.rows}x{weight.cols} {plan.path(weight, x.shape[0]).value}"
        t0 = time.perf_counter()
        f(out, x, weight)
        acc[key] += time.perf_counter() - t0
        cnt[key] += 1

    return w


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    eng = Engine.load(a.model, threads=a.threads, kv_cache_tokens=a.prompt_tokens + 64)
    from modelc.kernels.runtime import hugepages

    hugepages.wait()
    rng = np.random.default_rng(0)
    one = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)
    list(eng.generate_ids([1, *rng.integers(100, eng.runner.vocab_size, 40).tolist()], one))  # warm
    model = eng.runner.model
    K = model.kernels
    wrapped = {f.name: timed(f.name, getattr(K, f.name)) for f in dataclasses.fields(K) if f.name != "name"}
    wrapped["matmul"] = timed_matmul(K.matmul)
    model.kernels = dataclasses.replace(K, **wrapped)
    # the pieces under linear.matmul (looked up through their modules at each call), indented in the table
    quant.quantized = timed("  quant.quantized", quant.quantized)
    gemm_tile_amx.tile_act = timed("  amx tile_act", gemm_tile_amx.tile_act)
    gemm_tile_amx._act_terms = timed("  amx _act_terms", gemm_tile_amx._act_terms)
    for name in ("amx_r16_q4_0", "amx_r16_q8_0", "amx_r16_q4_k", "amx_r16_q6_k"):
        if hasattr(gemm_tile_amx, name):
            setattr(gemm_tile_amx, name, timed(f"  {name} kernel", getattr(gemm_tile_amx, name)))
    for kind, f in list(gemm_r16.F32_OF_KIND.items()):
        gemm_r16.F32_OF_KIND[kind] = timed(f"  r16 {f.__name__} (quantize + kernel)", f)
    best = None
    for r in range(a.rounds):
        ids = [1, *rng.integers(100, eng.runner.vocab_size, a.prompt_tokens - 1).tolist()]
        acc.clear()
        cnt.clear()
        t0 = time.perf_counter()
        list(eng.generate_ids(ids, one))
        dt = time.perf_counter() - t0
        print(f"round {r}: {dt:.2f} s ({a.prompt_tokens / dt:.1f} tok/s)", flush=True)
        if best is None or dt < best[0]:
            best = (dt, dict(acc), dict(cnt))
    dt, got, calls = best
    print(f"{a.model}: prefill of {a.prompt_tokens} tokens {dt:.2f} s ({a.prompt_tokens / dt:.1f} tok/s), "
          f"{a.threads} threads")  # fmt: skip
    for k in sorted(got, key=lambda k: -got[k]):
        print(
            f"  {k:42s} {got[k]:7.3f} s {100 * got[k] / dt:5.1f}% {calls[k]:5d} calls {1e3 * got[k] / calls[k]:8.2f} ms/call"
        )
    top = sum(v for k, v in got.items() if not k.startswith(" "))
    print(f"  outside the timed kernels {dt - top:.3f} s")


if __name__ == "__main__":
    main()
