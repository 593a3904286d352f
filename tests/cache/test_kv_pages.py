from __future__ import annotations

import numpy as np
import pytest

from modelc.cache.kv_pages import BLOCK_SIZE, KVPages
from modelc.errors import InvalidRequestError
from modelc.kernels.attention.kv_write import kv_write


@pytest.mark.parametrize("kv_dtype,itemsize", [("float32", 4), ("float16", 2)])
def test_shapes_and_sizes(kv_dtype, itemsize):
    kv = KVPages(3, 5, 2, 8, kv_dtype)
    assert kv.k.shape == (3, 5, BLOCK_SIZE, 2, 8) and kv.v.shape == kv.k.shape
    assert kv.nbytes == 2 * 3 * 5 * 16 * 2 * 8 * itemsize
    assert KVPages.bytes_per_block(3, 2, 8, kv_dtype) * 5 == kv.nbytes
    k, v = kv.layer(1)
    assert k.flags.c_contiguous and k.shape == (5, 16, 2, 8)
    k[0, 0, 0, 0] = 1
    assert kv.k[1, 0, 0, 0, 0] == 1  # a view, not a copy


@pytest.mark.parametrize("kv_dtype", ["float32", "float16"])
def test_write_then_read_back(kv_dtype):
    kv = KVPages(2, 4, 2, 8, kv_dtype)
    rng = np.random.default_rng(0)
    bt = np.array([3, 1], np.int32)
    n = 20
    k = rng.standard_normal((n, 2, 8)).astype(np.float32)
    v = rng.standard_normal((n, 2, 8)).astype(np.float32)
    p = np.arange(n)
    slots = (bt[p // 16].astype(np.int64) * 16 + p % 16).astype(np.int64)
    kp, vp = kv.layer(1)
    kv_write(kp, vp, k, v, slots)
    rk, rv = kv.read(1, bt, n)
    tol = 1e-3 if kv_dtype == "float16" else 0
    np.testing.assert_allclose(rk, k, rtol=tol, atol=tol)
    np.testing.assert_allclose(rv, v, rtol=tol, atol=tol)
    assert not kv.k[0].any()  # the other layer untouched


def test_bad_arguments():
    with pytest.raises(InvalidRequestError):
        KVPages(1, 1, 1, 1, "int3")
    with pytest.raises(InvalidRequestError):
        KVPages(1, 0, 1, 1)
