"""settle(runner): once a served model is loaded and runs on its compiled kernels, collect the heap once and
freeze what is left (gc.freeze), so the garbage collector no longer walks it while requests run; release():
unfreeze it when a served model goes (its objects can then be collected).

NOTE: a loaded model leaves ~180k long-lived Python objects (numba dispatchers and types, the tokenizer, the
server's modules); a full (generation 2) collection walks all of them with the GIL held: 120-145 ms measured
(SmolLM2-135M, Emerald Rapids, 2 vCPUs, under load). The first requests after a start allocate enough to set
off such collections, and the engine's worker thread then waits for the GIL at its next Python line: 100-220 ms
stalls in the first 20 decode steps of every restart traced (docs/benchmarks.md, issue 38). Frozen objects are
never collected, so the collection runs first: what the load left in reference cycles goes, the rest is kept
for the model's life anyway (weights, kernels, modules). A served model that is unloaded (the daemon's
keep-alive) releases the freeze, so its objects in reference cycles (and the weights they hold) are collected
again. A server opts in (EngineConfig.freeze_heap, set by `modelc run`): a library caller's or a test's
process keeps collecting as usual. CPython's gc docs advise freeze for a server that is ready; vLLM freezes its
heap after start-up the same way. No numba here.
"""

from __future__ import annotations

import gc
from typing import Any


def on_compiled_kernels(runner: Any) -> bool:
    """Whether `runner` serves on the numba kernels (not a cold start's hybrid set, still to flip)."""
    return getattr(getattr(getattr(runner, "model", None), "kernels", None), "name", None) == "numba"


def settle(runner: Any) -> bool:
    """Collect and freeze the heap where `runner` is on its compiled kernels; True when it did. A cold start's
    runner settles at its flip (the hybrid set's copies and the references' state go first)."""
    if not on_compiled_kernels(runner):
        return False
    gc.collect()
    gc.freeze()
    return True


def release() -> None:
    """A settled model goes: its frozen objects become collectable again (the next settle freezes anew)."""
    gc.unfreeze()
