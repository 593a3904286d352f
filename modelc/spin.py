"""How long idle compute threads spin: OpenMP's (numba's parallel kernels) and OpenBLAS's (numpy's BLAS), set in
the environment at `import modelc` (the package root imports this module first), before either library loads.

No numba, no numpy here: both read these variables once, when they load.
"""

from __future__ import annotations

import os
import sys

# OpenMP threads sleep once they have spun GOMP_SPINCOUNT rounds without work, and waking one costs more than a
# small kernel; a decode token runs ~100-200 parallel kernels with Python between them, so the spin decides
# decode speed. 100000 rounds (~1.6-3 ms) measured fastest on a quiet machine; engine/thread_tuner.py moves to
# fewer threads where spinning beside a busy process hurts. docs/benchmarks.md, "Threads that spin between
# kernels, and MoE row tasks of whole experts", has the figures. A user's setting wins; the test suite sets
# 1000 (tests/conftest.py).
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = "100000"
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

# OpenBLAS keeps its workers spinning ~0.1 s after every call by default, holding a core the next numba kernel
# needs; 2^16 cycles (~25 us) still spans the back-to-back calls of one attention. Read when numpy loads
# OpenBLAS, so only where modelc is imported first (the CLI and the server are); an explicit setting wins.
# Where numpy came first, kernels/runtime/threads.blas_threads_for keeps OpenBLAS to one thread instead (the
# float matmuls sgemm carries, gemm_blas, still take numba's count). docs/benchmarks.md, "Decode, prefill and
# batched decode against llama.cpp, second round (issue 20)" and "Batched decode in the decode layers, OpenBLAS
# after numpy, a fresh machine's figures", has the figures.
BLAS_SPIN_BOUNDED = "numpy" not in sys.modules or "OPENBLAS_THREAD_TIMEOUT" in os.environ
if "numpy" not in sys.modules:
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "16")
