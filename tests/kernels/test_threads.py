from __future__ import annotations

import numba
import numpy as np

from modelc.kernels import threads as blas_threads


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
