"""A KernelSet that serves before numba has compiled: each call runs the numba kernel if it is already
compiled in this process, else the exact numpy reference (kernels/reference/ref.py; for matmul its faster twin
kernels/matmul/blas_np.py, same fp32 values), never compiling itself.

A cold start (empty numba cache) builds the served model on hybrid_kernel_set(); a background thread
compiles the numba kernels on a second model of the same weights (engine/warm.py), so every kernel
switches to numba as soon as its signature is compiled; when that thread is done, Switch.numba_only()
makes every call go straight to numba. The reference and numba kernels agree within the tolerances of
tests/kernels (the int8-activation matmuls within ~5e-3 relative), so answers are the same model's.
"""

from __future__ import annotations

from dataclasses import fields

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
    # the reference's fp32 values: panel by panel ~5x faster than ref on a 1B Q4_0; from f32 copies, faster again
    slow["matmul"] = copies.matmul
    slots = {name: _Slot(getattr(fast, name), fn, switch) for name, fn in slow.items()}
    return KernelSet(name="hybrid", **slots), switch
