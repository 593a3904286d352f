"""Prefill attention alone: a long prompt's chunks, attention_flash's tiles against attention_blas's sgemm.

    PYTHONPATH=. .venv/bin/python benchmarks/attention_prefill.py [--ctx 4096] [--chunk 512] [--layers 4]
        [--heads 32 --kv-heads 4 --head-dim 64] [--kv-dtype float16] [--threads 2] [--rounds 3]

TinyLlama's shape by default (--heads 32 --kv-heads 8 --head-dim 128: Llama 3 8B). One round runs every chunk of
a --ctx prompt (--chunk rows each, each attending its positions and all before) through --layers layers, with
each kernel in turn (the order alternating between rounds); prints the median seconds per kernel for the whole
prompt (scaled to the model's layers with --model-layers), the ratio, and the last chunk's time alone.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

import numba
import numpy as np

from modelc.kernels.attention.attention_blas import attention_one_seq_blas
from modelc.kernels.attention.attention_flash import flash_prefill

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from attention_decode import filled_pages  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--chunk", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--model-layers", type=int, default=22)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--kv-dtype", default="float16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    numba.set_num_threads(a.threads)
    rng = np.random.default_rng(0)
    H, K, D, ctx = a.heads, a.kv_heads, a.head_dim, a.ctx
    kv = filled_pages(a.layers, ctx, K, D, a.kv_dtype, rng)
    table = np.arange(kv.num_blocks, dtype=np.int32)
    q = rng.standard_normal((a.chunk, H, D)).astype(np.float32)
    out = np.empty_like(q)
    kernels = {"flash": flash_prefill, "blas": attention_one_seq_blas}
    for fn in kernels.values():  # compile / load
        fn(out[:64], q[:64], *kv.layer(0), table, 0, 0.125, 0)
    total: dict[str, list[float]] = {k: [] for k in kernels}
    last: dict[str, list[float]] = {k: [] for k in kernels}
    for r in range(a.rounds):
        for name in list(kernels) if r % 2 == 0 else list(kernels)[::-1]:
            fn, t_all = kernels[name], 0.0
            for pos0 in range(0, ctx, a.chunk):
                n = min(a.chunk, ctx - pos0)
                t0 = time.perf_counter()
                for layer in range(a.layers):
                    fn(out[:n], q[:n], *kv.layer(layer), table, pos0, 0.125, 0)
                dt = time.perf_counter() - t0
                t_all += dt
            total[name].append(t_all * a.model_layers / a.layers)
            last[name].append(dt * a.model_layers / a.layers)
    f, b = (statistics.median(total[k]) for k in ("flash", "blas"))
    fl, bl = (statistics.median(last[k]) for k in ("flash", "blas"))
    print(f"H {H} K {K} D {D} {a.kv_dtype}, {ctx}-token prompt in {a.chunk}-row chunks, {a.model_layers} layers, "
          f"{a.threads} threads: flash {f:.2f} s, blas {b:.2f} s ({b / f:.2f}x); last chunk {fl:.2f} / {bl:.2f} s "
          f"({bl / fl:.2f}x)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
