"""warm_matmuls: run every matmul kernel the plan can pick for some weights once, so numba compiles them (or loads
them from its cache) before a request needs them. The Runner's warmup calls it (engine/runner.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from modelc.kernels.matmul import gemm_blas, plan
from modelc.kernels.matmul.gemm_weight import Weight


def warm_matmuls(matmul: Callable, weights: list[Weight]) -> None:
    """Run `matmul` once per kernel kernels.matmul.plan.plan_matmul can pick for each weight (at the smallest T
    reaching it: plan.warm_tokens), on a 64-row slice, so every matmul kernel a request can reach is compiled
    (or loaded from numba's cache); plus the BLAS path for types whose prefill never reaches it, which
    64+-row embedding lookups (gemm_blas.dequantize_into) still use."""
    for w in weights:
        r = min(w.rows, 64)  # 64+ rows: the panel dequantizer's threaded variant
        part = dataclasses.replace(
            w,
            rows=r,
            blocks=w.blocks[:r],
            scale=None if w.scale is None else w.scale[:r],
            r16=None if w.r16 is None else w.r16[: r // 16],
        )
        points = plan.warm_tokens(part)
        for t in points.values():
            matmul(np.empty((t, r), np.float32), np.zeros((t, part.cols), np.float32), part)
        if plan.Path.BLAS not in points:
            t = plan.PREFILL_MIN_T
            gemm_blas.blas_matmul(np.empty((t, r), np.float32), np.zeros((t, part.cols), np.float32), part)
