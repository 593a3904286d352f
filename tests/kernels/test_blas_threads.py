from __future__ import annotations

import numpy as np

from modelc.kernels import blas_threads


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
