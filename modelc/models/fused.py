"""Fused projections: consecutive weights that read the same input (q/k/v, gate/up) run as ONE matmul.

A decode step of a 1.1B model made ~154 matmul calls per token, each its own parallel region (threads
woken, work split, joined), its own activation quantization and its own Python glue; the q/k/v matrices
(256 rows each for k and v in TinyLlama) are too small to keep two threads busy. Where consecutive
projections repack alike for gemm_r16 (same dtype and columns, rows in whole 16-row groups), their
repacked groups are concatenated once at load into one array: the fused Weight's r16 is that array and
each part's r16 is a view of its rows in it (no second copy of any weight). The forward then runs one
matmul over all of their rows and copies each part's columns out; LoRA deltas and biases are added per
part afterwards, as before. Exact: gemm_r16 computes each 16-row group on its own, so every output is the
same number as the part's own call. Parts of another dtype (Q4_K_M's Q6_K attn_v) run on their own.

The fused Weight holds only r16 (its `blocks` is empty): use it only where plan.path(weight, T) is
Path.R16 and T <= MAX_T (`Fused.fits`); at other T (prefill, AMX) the parts run on their own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from modelc.kernels.matmul import gemm_r16, plan
from modelc.kernels.matmul.linear import Weight
from modelc.kernels.matmul.plan import Path
from modelc.models import r16_cache

MAX_T = 32
"""Fused runs serve up to this many tokens (decode, batched decode, short prompts): above it a call's fixed
costs are small next to its work, and the fused output buffer (the model keeps one of MAX_T rows) stays small."""


@dataclass(frozen=True, slots=True)
class Fused:
    weight: Weight  # the parts' rows concatenated; only its r16 is real
    first: int  # index of the first part (in the tuple of projections given to fuse_runs)
    bounds: tuple[int, ...]  # row offsets: part first + j is weight rows bounds[j] .. bounds[j + 1]

    def fits(self, t: int) -> bool:
        """Whether the fused matmul runs at t tokens: up to MAX_T, on the gemm_r16 path (the only one that reads it)."""
        return t <= MAX_T and plan.path(self.weight, t) is Path.R16


def fuse_runs(
    ws: list[Weight], repack: bool, pin: Callable[[Weight], Weight], place: Callable[[np.ndarray], None]
) -> tuple[list[Weight], tuple[Fused, ...]]:
    """The weights `ws` (as read from the file, not yet repacked) ready for matmul, and one Fused per run of
    two or more consecutive ones that repack alike. Weights in no run go through `pin` (the reader's usual
    repack and huge-page queueing); `place` takes each fused array (the reader's huge-page queueing). `repack`:
    whether the reader repacks for gemm_r16 at all."""
    out: list[Weight] = []
    runs: list[Fused] = []
    i = 0
    while i < len(ws):
        j = i + 1
        if repack and _fusable(ws[i]):
            while j < len(ws) and _fusable(ws[j]) and (ws[j].dtype, ws[j].cols) == (ws[i].dtype, ws[i].cols):
                j += 1
        if j - i < 2:
            out.append(pin(ws[i]))
            i += 1
            continue
        got = _fuse(ws[i:j], place, i)
        if got is None:  # a kind whose repacked layout is not one row of bytes per 16-row group
            out.extend(pin(w) for w in ws[i:j])
        else:
            out.extend(got[0])
            runs.append(got[1])
        i = j
    return out, tuple(runs)


def _fusable(w: Weight) -> bool:
    return w.blocks.size > 0 and w.scale is None and gemm_r16.can_repack(w.dtype, w.rows, w.cols)


def _fuse(ws: list[Weight], place: Callable[[np.ndarray], None], first: int) -> tuple[list[Weight], Fused] | None:
    whole = r16_cache.repacked([w.blocks for w in ws], ws[0].dtype)  # (sum N / 16, group bytes)
    if whole is None:  # a kind whose repacked layout is not one row of bytes per 16-row group
        return None
    place(whole)
    bounds = [0]
    for w in ws:
        bounds.append(bounds[-1] + w.rows)
    parts = [replace(w, r16=whole[a // 16 : b // 16]) for w, a, b in zip(ws, bounds, bounds[1:], strict=False)]
    n = bounds[-1]
    weight = Weight(ws[0].dtype, n, ws[0].cols, np.empty((n, 0), np.uint8), None, r16=whole)
    return parts, Fused(weight, first, tuple(bounds))
