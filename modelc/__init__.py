"""modelc: turn model weights into one .modelc file and serve it fast on CPUs."""

from __future__ import annotations

import os
import sys

from modelc.version import __version__

# OpenMP threads (numba's parallel kernels, OpenBLAS) spin while they wait by default (libgomp:
# ~300000 rounds); on a busy CPU that starves a descheduled peer thread and made 2-thread decode
# 10x slower (measured, docs/kernels.md). Fully passive waiting costs the other extreme: every
# parallel kernel then wakes a sleeping thread, ~45 us on this VM, ~180 times per decode token.
# So the threads spin briefly (GOMP_SPINCOUNT=1000: the gap between two kernels of one token)
# and then sleep: TinyLlama Q4_K_M decode 25.7-29.8 vs 21.5-24.9 tok/s fully passive (2 threads,
# quiet VM). Both are read when libgomp loads, at the first parallel kernel, so they are set
# here, when the package is imported. An explicit setting of either from the user wins.
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = "1000"
os.environ.setdefault("OMP_WAIT_POLICY", "passive")
# OpenBLAS (numpy's BLAS: prefill attention, the BLAS matmul path) keeps its worker thread spinning for
# 2^28 cycles (~0.1 s) after every call, so through a prefill it held a core that numba's threads needed
# for the next layer's matmuls: their kernels ran 1.7x slower inside the prefill than alone. 2^16 cycles
# (~25 us) still spans the back-to-back calls of one attention: TinyLlama Q4_0 prefill of 128 tokens went
# from 112-133 to 172-216 tok/s (2 threads, same runs). Read when OpenBLAS loads (with numpy), so only
# where modelc is imported first (the CLI and the server are); an explicit setting wins.
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
