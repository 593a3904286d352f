from __future__ import annotations

import numba
import numpy as np

from modelc.kernels.runtime import threads as blas_threads


def test_set_blas_threads_changes_openblas_and_keeps_results():
    a = np.random.default_rng(0).standard_normal((200, 300)).astype(np.float32)
    want = a @ a.T
    before = blas_threads.get_blas_threads()
    assert before is not None  # numpy in this venv is OpenBLAS
    try:
        assert blas_threads.set_blas_threads(1)
        assert blas_threads.get_blas_threads() == 1
        np.testing.assert_allclose(a @ a.T, want, rtol=1e-5, atol=1e-4)
        assert blas_threads.set_blas_threads(2)
        assert blas_threads.get_blas_threads() == 2
    finally:
        blas_threads.set_blas_threads(before)


def test_set_compute_threads_sets_numba_and_blas():
    before_numba, before_blas = numba.get_num_threads(), blas_threads.get_blas_threads()
    try:
        blas_threads.set_compute_threads(1)
        assert numba.get_num_threads() == 1 and blas_threads.get_blas_threads() == 1
        blas_threads.set_compute_threads(10_000)  # capped at numba's pool size
        assert numba.get_num_threads() == numba.config.NUMBA_NUM_THREADS
    finally:
        numba.set_num_threads(before_numba)
        blas_threads.set_blas_threads(before_blas)


_ORDER_PROBE = """
import os, sys
if sys.argv[1] == "numpy-first":
    import numpy
import modelc
import numpy as np
from modelc.kernels.matmul import gemm_blas
from modelc.kernels.runtime import threads
from modelc.engine.runner import Runner
from modelc.models.tiny import make_tiny_llama
runner = Runner(make_tiny_llama(3), num_kv_blocks=4, threads=2)
runner._set_threads()
seen = []
real = gemm_blas._blas_threads_local
gemm_blas._blas_threads_local = lambda n: seen.append(n) or real(n)
for rows in (32, 2048):  # a router-sized sgemm, then a projection-sized one (numba has 2 threads)
    x, wt = np.ones((128, 1024), np.float32), np.ones((1024, rows), np.float32)
    gemm_blas._matmul(x, wt, np.empty((128, rows), np.float32))
print("RESULT", modelc.spin.BLAS_SPIN_BOUNDED, threads.blas_threads_for(2), threads.get_blas_threads(), seen[0::2])
"""


def test_openblas_keeps_one_thread_where_its_workers_would_spin():
    """Imported after numpy, modelc cannot bound OpenBLAS's spin (OPENBLAS_THREAD_TIMEOUT is read when numpy
    loads it): the engine's process-wide BLAS count drops to 1 and small sgemm runs on one thread; imported
    first, or with the user's own timeout, the budget stands."""
    import os
    import subprocess
    import sys

    if numba.config.NUMBA_NUM_THREADS < 2 or blas_threads.get_blas_threads() is None:
        import pytest

        pytest.skip("needs 2 numba threads and numpy's OpenBLAS")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    got = {}
    for order, extra in (("numpy-first", {}), ("modelc-first", {}), ("numpy-first", {"OPENBLAS_THREAD_TIMEOUT": "16"})):
        out = subprocess.run([sys.executable, "-c", _ORDER_PROBE, order], capture_output=True, text=True, timeout=240,
                             env={**env, **extra, "NUMBA_NUM_THREADS": "2"})  # fmt: skip
        assert out.returncode == 0, out.stderr[-2000:]
        got[order, bool(extra)] = out.stdout.split("RESULT ")[1].split("\n")[0]
    assert got["numpy-first", False] == "False 1 1 [1, 2]"
    assert got["modelc-first", False] == "True 2 2 [2, 2]"
    assert got["numpy-first", True] == "True 2 2 [2, 2]"
