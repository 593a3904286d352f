"""A KernelSet that serves before numba has compiled: each call runs the numba kernel if it is already
compiled in this process, else the exact numpy reference (kernels/reference/ref.py; for matmul its faster twin
kernels/matmul/blas_np.py, same fp32 values), never compiling itself.

A cold start (empty numba cache) builds the served model on hybrid_kernel_set(); a background thread
compiles the numba kernels on a second model of the same weights (engine/warm.py), so every kernel
switches to numba as soon as its signature is compiled; when that thread is done, Switch.numba_only()
makes every call go straight to numba. The reference and numba kernels agree within the tolerances of
tests/kernels, so answers are the same model's.

The numpy matmul rounds its activations as the numba model that takes over will: where that model's matmul of a
weight quantizes them to int8 blocks (llama.cpp's Q8 activations: every repacked weight at any T, the int8 paths of
the others), the numpy one multiplies the same blocks dequantized (ref_linear.quantize_act), so the two differ by
float summation order instead of ~5e-3 relative: a first request served on the references decodes the same greedy
tokens as the warm path instead of parting from them at some token of a real model (SmolLM2-135M Q4_1: its
32-token `benchmarks/first_run.py` request did, docs/benchmarks.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import fields
from typing import Any

import numpy as np

from modelc.kernels.runtime import cpu
from modelc.kernels.runtime.nocompile import WouldCompile, install, no_compile
from modelc.kernels.select import KernelSet, kernel_set


class Switch:
    """Shared by every slot of one hybrid KernelSet: counters, and the flip to numba-only."""

    __slots__ = ("only_numba", "ref_calls", "numba_calls", "copies")

    def __init__(self, copies=None) -> None:
        self.copies = copies  # the numpy matmul's f32 weight copies (blas_np.Dequantized), None without them
        self.only_numba = False
        self.ref_calls = 0  # calls served by the reference because numba had not compiled the kernel yet
        self.numba_calls = 0  # calls served by numba before the flip (after it, not counted)

    def numba_only(self) -> None:
        """From now on every call runs numba directly (compiling on a miss, as the plain numba set does)."""
        self.only_numba = True


class _Slot:
    __slots__ = ("fast", "ref", "switch")

    def __init__(self, fast, ref, switch: Switch) -> None:
        self.fast, self.ref, self.switch = fast, ref, switch

    def __call__(self, *args):
        sw = self.switch
        if sw.only_numba:
            return self.fast(*args)
        try:
            with no_compile():
                out = self.fast(*args)
        except WouldCompile:
            # NOTE: a kernel that gave up here wrote at most part of its outputs (a multi-kernel matmul's
            # out, KV slots it rewrites whole), never an input it reads: the reference recomputes them all.
            sw.ref_calls += 1
            return self.ref(*args)
        sw.numba_calls += 1
        return out


def hybrid_kernel_set(copy_budget_bytes: int = 0) -> tuple[KernelSet, Switch] | None:
    """(KernelSet named "hybrid", its Switch), or None where this numba cannot refuse to compile.
    copy_budget_bytes: f32 copies of the weights its numpy matmul may keep (blas_np.Dequantized), freed with
    the set; 0 dequantizes every weight at every call."""
    if not install():
        return None
    from modelc.kernels.matmul import blas_np

    copies = blas_np.Dequantized(copy_budget_bytes)
    fast, ref, switch = kernel_set("numba"), kernel_set("ref"), Switch(copies)
    slow = {f.name: getattr(ref, f.name) for f in fields(KernelSet) if f.name != "name"}
    # the reference's fp32 values: panel by panel ~5x faster than ref on a 1B Q4_0; from f32 copies, faster again;
    # its activations rounded as the numba model's matmuls round them
    slow["matmul"] = activations_as_numba(copies.matmul)
    slots = {name: _Slot(getattr(fast, name), fn, switch) for name, fn in slow.items()}
    return KernelSet(name="hybrid", **slots), switch


_FP32_PATHS = frozenset({"ref", "blas", "float", "half"})  # plan.Path values whose kernels multiply fp32 activations


def activations_as_numba(matmul: Callable) -> Callable:
    """matmul(out, x, w), with x rounded to int8 blocks first where the numba model quantizes the activations of w
    at x's token count (quantizes_activations)."""

    def run(out: np.ndarray, x: np.ndarray, w: Any) -> None:
        if x.shape[0] and quantizes_activations(w, x.shape[0]):
            x = _rounded(x)
        matmul(out, x, w)

    return run


def quantizes_activations(w: Any, t: int) -> bool:
    """Whether the numba model's matmul of weight w (as stored in the file) at t tokens quantizes its activations:
    a weight the numba model repacks runs gemm_r16's int8 kernels at every T (models/weights.py); another one runs
    its plan (kernels/matmul/plan.py), int8 but on the fp32 paths (BLAS prefill, F32/F16 weights, the references)."""
    from modelc.kernels.matmul import gemm_r16, plan
    from modelc.kernels.quant import quant

    if w.dtype not in quant.KIND or w.cols % 32:
        return False
    if os.environ.get("MODELC_REPACK", "1") != "0" and gemm_r16.can_repack(w.dtype, w.rows, w.cols):
        return not cpu.use_reference()
    return plan.plan_matmul(w, t).value not in _FP32_PATHS


def _rounded(x: np.ndarray) -> np.ndarray:
    """x (T, C) f32 as the int8-activation kernels see it: per 32-block, its int8 codes times the block's scale."""
    from modelc.kernels.reference.ref_linear import QK, quantize_act

    t, c = x.shape
    q, d = quantize_act(np.ascontiguousarray(x, dtype=np.float32))
    return (q.reshape(t, c // QK, QK).astype(np.float32) * d[:, :, None]).reshape(t, c)
