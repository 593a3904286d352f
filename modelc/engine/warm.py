"""warmup(runner): Runner.warmup, split over two processes when numba's cache is cold.

NOTE: numba compiles one function at a time under the GIL, so threads do not help; processes
do, because compiled kernels land in numba's on-disk cache (cache=True) where any process loads
them. With a cold cache a helper process (`python -m modelc.engine.warm ARTIFACT`) compiles
what the 2-sequence forward and the prefill paths need (batched matmuls, BLAS conversions, the
parallel and sgemm attention) while this process compiles the single-sequence decode path; then
this process runs the whole warmup, which now loads nearly everything from the cache. With a warm
cache, or a model that is not a file (tests build models in memory), it is Runner.warmup alone.
The helper only ever writes numba's cache: if it fails or is slow, this process compiles the rest.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

HELPER_TIMEOUT_S = 900.0


def warmup(runner: Any, *, parallel: bool | None = None) -> float:
    """Compile (or load) every kernel a request can reach; returns seconds. parallel=None: when it pays."""
    t0 = time.perf_counter()
    helper = _start_helper(runner) if (parallel if parallel is not None else _worth_a_helper(runner)) else None
    if helper is not None:
        ids = list(range(1))
        runner._scratch_forward([ids], "logits")  # the decode path, here, while the helper does the rest
        try:
            helper.wait(timeout=HELPER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            helper.kill()
            helper.wait()
    runner.warmup()
    return time.perf_counter() - t0


def warm_matmuls(matmul: Any, weights: list[Any]) -> None:
    """Run `matmul` once per kernel kernels.plan.plan_matmul can pick for each weight (at the smallest T
    reaching it: plan.warm_tokens), on a 64-row slice, so every matmul kernel a request can reach is compiled
    (or loaded from numba's cache); plus the BLAS path for types whose prefill never reaches it, which
    64+-row embedding lookups (gemm_blas.dequantize_into) still use."""
    import dataclasses

    import numpy as np

    from modelc.kernels import gemm_blas, plan

    for w in weights:
        r = min(w.rows, 64)  # 64+ rows: the panel dequantizer's threaded variant
        part = dataclasses.replace(w, rows=r, blocks=w.blocks[:r], scale=None if w.scale is None else w.scale[:r])
        points = plan.warm_tokens(part)
        for t in points.values():
            matmul(np.empty((t, r), np.float32), np.zeros((t, part.cols), np.float32), part)
        if plan.Path.BLAS not in points:
            t = plan.PREFILL_MIN_T
            gemm_blas.blas_matmul(np.empty((t, r), np.float32), np.zeros((t, part.cols), np.float32), part)


def _worth_a_helper(runner: Any) -> bool:
    if getattr(runner.model.kernels, "name", "") != "numba" or (os.cpu_count() or 1) < 2:
        return False
    if getattr(sys, "frozen", False):  # a compiled executable: sys.executable is the app, not Python
        return False
    if _artifact_args(runner.source) is None:
        return False
    return not _cached("modelc.kernels.attention", "paged_attention_parallel")


def _cached(module: str, name: str) -> bool:
    """Whether numba's cache holds an index for this kernel (any signature: a warm cache, or an older one)."""
    try:
        import importlib

        disp = getattr(importlib.import_module(module), name)
        return os.path.exists(disp._cache._cache_file._index_path)
    except (AttributeError, ImportError):
        return True  # no way to tell: do not start a helper that may only duplicate work


def _artifact_args(source: Any) -> list[str] | None:
    path = getattr(source, "path", None)
    if not path or not os.path.isfile(path):
        return None
    return [str(path), str(int(getattr(source, "offset", 0) or 0)), str(int(getattr(source, "file_size", 0) or 0))]


def _start_helper(runner: Any) -> subprocess.Popen | None:
    args = _artifact_args(runner.source)
    if args is None:
        return None
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "modelc.engine.warm", *args, runner.kv.kv_dtype],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    except OSError:
        return None


def _helper_main(argv: list[str]) -> int:
    """The helper: load the artifact and compile the 2-sequence forward and the prefill kernels."""
    from modelc.artifact.reader import open_artifact
    from modelc.engine.runner import Runner

    path, offset, length, kv_dtype = argv
    art = open_artifact(path, offset=int(offset), length=int(length) or None)
    runner = Runner(art, num_kv_blocks=2, kv_dtype=kv_dtype, threads=1)
    runner._scratch_forward([[0], [0]], "logits")
    runner._warm_prefill_kernels()
    return 0


if __name__ == "__main__":
    raise SystemExit(_helper_main(sys.argv[1:]))
