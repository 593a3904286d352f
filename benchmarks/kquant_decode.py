"""T=1 K-quant matvec: the generic unpack-rows kernel (gemm_int.qmatmul_rows) vs gemm_fused_k.qmatvec_k, A/B.

    .venv/bin/python benchmarks/kquant_decode.py [--gguf /tmp/modelc-bench/tinyllama-1.1b-Q4_K_M.gguf]
        [--threads 2] [--rounds 9]                      # kernels: every K-quant matrix of the file
    .venv/bin/python benchmarks/kquant_decode.py --synthetic Q4_K,Q5_K,Q6_K
        # kernels on random FFN-shaped matrices (copies rotating over > 384 MiB per type)

One pass (one decode token) is one T=1 matvec over every 2-D K-quant weight of the GGUF
(token_embd excluded, output.weight included), read from the mmap'd file, so ~0.6 GB of
weights stream from memory per pass (more than the L3). The activation quantization is
done once per input width, outside the timing. Rounds alternate rows, new, rows, new, ...;
medians are reported per stored type and in total (ms per pass, GB/s of weight bytes), with
the load average. linear.matmul runs qmatvec_k for T=1 K-quants; end to end, use
benchmarks/compare_llamacpp.py. (The kernel it replaced, gemm_fused's K-quant rows, was
removed after it landed: 2.5x slower than qmatvec_k on these matrices, load 1.9.)
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # what modelc.kernels.matmul.linear sets

import numba  # noqa: E402
import numpy as np  # noqa: E402

from modelc.kernels.matmul import gemm_fused_k, gemm_int
from modelc.kernels.quant import quant  # noqa: E402

DEFAULT_GGUF = "/tmp/modelc-bench/tinyllama-1.1b-Q4_K_M.gguf"
_ONE = np.ones(1, np.float32)


def _rows(out, xq, xd, xs, w, kind):
    """The generic int8-activation kernel (each row unpacked to L1, then dotted): the baseline."""
    gemm_int.qmatmul_rows(out, xq, xd, xs, w, kind, _ONE, False)


def load_matrices(path: str) -> list[tuple[str, int, int, np.ndarray]]:
    """(type name, kind, C, (N, row_bytes) uint8 view) for every 2-D K-quant weight but token_embd."""
    import gguf

    from modelc.ir import DataType

    out = []
    for t in gguf.GGUFReader(path).tensors:
        if len(t.shape) != 2 or t.name == "token_embd.weight":
            continue
        dt = DataType.from_ggml(int(t.tensor_type))
        if dt not in quant.KIND or quant.KIND[dt] not in gemm_fused_k.KINDS:
            continue
        n, c = int(t.shape[1]), int(t.shape[0])
        out.append((dt.name, quant.KIND[dt], c, np.asarray(t.data).reshape(-1).view(np.uint8).reshape(n, -1)))
    return out


def synthetic_matrices(names: list[str]) -> list[tuple[str, int, int, np.ndarray]]:
    """Copies of a random TinyLlama FFN-shaped (5632, 2048) matrix per type, > 384 MiB each type."""
    from modelc.ir import DataType
    from modelc.kernels.matmul.gemm_random import random_tensor

    rng = np.random.default_rng(0)
    out = []
    for name in names:
        dt = DataType[name]
        w = np.asarray(random_tensor(dt, 5632, 2048, rng).data).reshape(5632, -1)  # (N, row_bytes)
        out += [(name, quant.KIND[dt], 2048, w.copy()) for _ in range((400 << 20) // w.nbytes + 1)]
    return out


def run_kernels(path: str, threads: int, rounds: int, synthetic: list[str]) -> None:
    numba.set_num_threads(threads)
    numba.set_parallel_chunksize(4)  # linear.CHUNK: dynamic tasks of 4 x 16 rows
    mats = synthetic_matrices(synthetic) if synthetic else load_matrices(path)
    if not mats:
        raise SystemExit(f"{path}: no Q4_K/Q5_K/Q6_K matrices")
    rng = np.random.default_rng(0)
    acts = {}
    for _, _, c, _ in mats:
        if c not in acts:
            x = rng.standard_normal((1, c)).astype(np.float32)  # (1, C)
            xq = np.empty((1, c), np.int8)  # (1, C)
            xd = np.empty((1, c // 32), np.float32)  # (1, C/32)
            xs = np.empty((1, c // 16), np.float32)  # (1, C/16)
            quant.quantize_act(xq, xd, xs, x)
            acts[c] = (xq, xd, xs)
    outs = [np.empty((1, w.shape[0]), np.float32) for *_, w in mats]  # (1, N) each
    kernels = {"rows": _rows, "new": gemm_fused_k.qmatvec_k}
    names = sorted({m[0] for m in mats})
    nbytes = {k: sum(w.nbytes for name, _, _, w in mats if name == k) for k in names}
    times = {(label, k): [] for label in kernels for k in [*names, "all"]}
    check = {}
    for label, fn in kernels.items():  # warm-up (compile or load the cache) and a cross-check
        for (_, kind, c, w), o in zip(mats, outs, strict=True):
            fn(o, *acts[c], w, kind)
        check[label] = np.concatenate([o.ravel() for o in outs])
    rel = float(np.abs(check["rows"] - check["new"]).max() / np.abs(check["rows"]).max())
    print(f"rows vs new max rel diff {rel:.2e}; {len(mats)} matrices, {sum(nbytes.values()) / 1e6:.0f} MB")
    load0 = os.getloadavg()
    for _ in range(rounds):
        for label, fn in kernels.items():
            per = dict.fromkeys(names, 0.0)
            t_all = time.perf_counter()
            for (name, kind, c, w), o in zip(mats, outs, strict=True):
                t0 = time.perf_counter()
                fn(o, *acts[c], w, kind)
                per[name] += time.perf_counter() - t0
            times[(label, "all")].append(time.perf_counter() - t_all)
            for k in names:
                times[(label, k)].append(per[k])
    load1 = os.getloadavg()
    print(f"threads {threads}, {rounds} rounds A/B, load average {load0[0]:.2f} -> {load1[0]:.2f}")
    print("| matrices | MB | rows ms/pass | rows GB/s | new ms/pass | new GB/s | speedup |")
    print("|---|---|---|---|---|---|---|")
    for k in [*names, "all"]:
        b = sum(nbytes.values()) if k == "all" else nbytes[k]
        o_s = float(np.median(times[("rows", k)]))
        n_s = float(np.median(times[("new", k)]))
        print(
            f"| {k} | {b / 1e6:.0f} | {o_s * 1e3:.1f} | {b / o_s / 1e9:.2f} | {n_s * 1e3:.1f} | "
            f"{b / n_s / 1e9:.2f} | {o_s / n_s:.2f}x |"
        )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", default=DEFAULT_GGUF)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument(
        "--synthetic", default="", help="e.g. Q5_K,Q4_K: random (5632, 2048) copies (> 384 MiB per type), not the GGUF"
    )
    a = ap.parse_args(argv)
    run_kernels(a.gguf, a.threads, a.rounds, [t for t in a.synthetic.split(",") if t])
    return 0


if __name__ == "__main__":
    sys.exit(main())
