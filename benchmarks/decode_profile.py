"""Where a decode token's time goes: every KernelSet entry of the model (and the matmul kernels under
linear.matmul) wrapped in a timer, over greedy decode steps after a 128-token prompt; best of 3 rounds.

    PYTHONPATH=. python benchmarks/decode_profile.py MODEL.gguf [--threads 2] [--tokens 32]

Prints ms per token, calls per token and us per call of each, the Python glue in the forward (forward
minus its kernel calls) and the engine's share (step minus forward). The timers cost ~0.3 us per call.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import time

import numpy as np

from modelc.api.engine import Engine
from modelc.kernels import decode_layer, gemm_fused, gemm_fused_k, gemm_r16, quant
from modelc.request import SamplingParams

acc: dict[str, float] = collections.defaultdict(float)
cnt: collections.Counter = collections.Counter()


def timed(name: str, f):
    def w(*args, **kw):
        t0 = time.perf_counter()
        r = f(*args, **kw)
        acc[name] += time.perf_counter() - t0
        cnt[name] += 1
        return r

    return w


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=32)
    a = ap.parse_args()
    eng = Engine.load(a.model, threads=a.threads, kv_cache_tokens=512)
    ids = [1, *np.random.default_rng(0).integers(100, eng.runner.vocab_size, 127).tolist()]
    warm = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)
    list(eng.generate_ids(ids[:8], warm))
    list(eng.generate_ids(ids[:48], warm))
    model = eng.runner.model
    K = model.kernels
    model.kernels = dataclasses.replace(
        K, **{f.name: timed(f.name, getattr(K, f.name)) for f in dataclasses.fields(K) if f.name != "name"}
    )
    # under linear.matmul (it calls them through their modules)
    quant.quantize_act = timed("  quantize_act", quant.quantize_act)
    gemm_r16.matmul_f32 = timed("  r16 kernel + quantize", gemm_r16.matmul_f32)
    # a one-token step's fused layers (models/llama_decode.py): their kernels run inside these two calls
    decode_layer.attention_half = timed("attention half (fused)", decode_layer.attention_half)
    decode_layer.mlp_half = timed("mlp half (fused)", decode_layer.mlp_half)
    gemm_fused_k.qmatvec_k = timed("  matvec_k kernel", gemm_fused_k.qmatvec_k)
    gemm_fused.qmatvec = timed("  matvec kernel", gemm_fused.qmatvec)
    model.forward = timed("forward", model.forward)
    best = None
    for _ in range(3):
        it = eng.generate_ids(ids, SamplingParams(max_tokens=a.tokens + 1, temperature=0.0, ignore_eos=True))
        next(it)
        acc.clear()
        cnt.clear()
        t0 = time.perf_counter()
        n = sum(1 for _ in it)
        per = (time.perf_counter() - t0) / n
        if best is None or per < best[0]:
            best = (per, dict(acc), dict(cnt), n)
    per, got, calls, n = best
    print(f"{a.model}: {1e3 * per:.2f} ms/token ({1 / per:.2f} tok/s), {a.threads} threads")
    for k in sorted(got, key=lambda k: -got[k]):
        print(
            f"  {k:20s} {1e3 * got[k] / n:7.2f} ms/token {calls[k] / n:6.1f} calls/token {1e6 * got[k] / calls[k]:8.1f} us/call"
        )
    kernels = sum(v for k, v in got.items() if k != "forward" and not k.startswith(" "))
    print(f"  python glue in forward {1e3 * (got['forward'] - kernels) / n:.2f} ms/token; "
          f"engine (step - forward) {1e3 * (per - got['forward'] / n):.2f} ms/token")  # fmt: skip


if __name__ == "__main__":
    main()
