"""engine/heap.py: a served model's heap is collected and frozen once it runs on compiled kernels, and released."""

from __future__ import annotations

import gc
from types import SimpleNamespace

from modelc.engine import heap


def _runner(kernels: str) -> SimpleNamespace:
    return SimpleNamespace(model=SimpleNamespace(kernels=SimpleNamespace(name=kernels)))


def test_settle_freezes_only_a_runner_on_compiled_kernels_and_release_unfreezes():
    assert gc.get_freeze_count() == 0
    try:
        assert not heap.settle(_runner("hybrid"))  # a cold start's: it settles at its flip
        assert not heap.settle(SimpleNamespace())
        assert gc.get_freeze_count() == 0
        garbage = [[]]
        garbage[0].append(garbage)  # a reference cycle: collected before the freeze, not kept forever
        ref = id(garbage)
        del garbage
        assert heap.settle(_runner("numba"))
        assert gc.get_freeze_count() > 0
        assert all(id(o) != ref for o in gc.get_objects(generation=2))
    finally:
        heap.release()
    assert gc.get_freeze_count() == 0
