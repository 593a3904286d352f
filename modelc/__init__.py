"""modelc: turn model weights into one .modelc file and serve it fast on CPUs."""

from __future__ import annotations

import os
import sys

from modelc.version import __version__

# OpenMP threads (numba's parallel kernels) sleep once they have spun GOMP_SPINCOUNT rounds without work.
# Waking a sleeping thread costs ~25-45 us on this VM, ~100 us once its vCPU has halted (after ~1.6 ms), and
# a decode token runs ~90-180 parallel kernels with Python between them, so the spin decides decode speed:
# 1000 rounds (< 30 us) made every kernel wait for a wake-up, TinyLlama Q4_0 decode median 29-31 tok/s;
# 100000 (~1.6-3 ms here, libgomp's own estimate is 1 ms) 35-39, best 45-51 (2 threads, quiet VM, the same
# runs). Spinning is also what makes 2 threads beside a busy process very slow (2-9 tok/s against 20 at 1000
# rounds): engine/thread_tuner.py measures that and moves to half the threads, where it is 27-29.
# Read when libgomp loads, at the first parallel kernel, so set here, at import. A user's setting wins;
# the test suite runs 2 processes on 2 cores and sets 1000 (tests/conftest.py).
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = "100000"
os.environ.setdefault("OMP_WAIT_POLICY", "passive")
# OpenBLAS (numpy's BLAS: prefill attention, the BLAS matmul path) keeps its worker thread spinning for
# 2^28 cycles (~0.1 s) after every call, so through a prefill it held a core that numba's threads needed
# for the next layer's matmuls: their kernels ran 1.7x slower inside the prefill than alone. 2^16 cycles
# (~25 us) still spans the back-to-back calls of one attention: TinyLlama Q4_0 prefill of 128 tokens went
# from 112-133 to 172-216 tok/s (2 threads, same runs). Read when OpenBLAS loads (with numpy), so only
# where modelc is imported first (the CLI and the server are); an explicit setting wins.
# Where numpy came first (a script that imports numpy, then modelc), OpenBLAS already runs with its 0.1 s
# spin: kernels/runtime/threads.blas_threads_for then keeps OpenBLAS to one thread (no worker left spinning), except
# for the float matmuls sgemm carries (gemm_blas), which still take numba's count.
_BLAS_SPIN_BOUNDED = "numpy" not in sys.modules or "OPENBLAS_THREAD_TIMEOUT" in os.environ
if "numpy" not in sys.modules:
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "16")

__all__ = ["__version__", "Engine", "AsyncEngine"]


def __getattr__(name: str):  # lazy: `import modelc` must stay cheap (no numba import)
    if name == "Engine":
        from modelc.api.engine import Engine

        return Engine
    if name == "AsyncEngine":
        from modelc.api.async_engine import AsyncEngine

        return AsyncEngine
    raise AttributeError(name)
