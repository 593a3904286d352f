from __future__ import annotations

import ctypes
import mmap
import sys

import numpy as np
import pytest

from modelc.cache.kv_pages import BLOCK_SIZE, COMMIT_MIN_BYTES, KVPages
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


def _resident_fraction(a: np.ndarray) -> float:
    """The share of the memory pages under `a` that are mapped in this process now (mincore)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    page = mmap.PAGESIZE
    start = a.ctypes.data // page * page
    n = (a.ctypes.data + a.nbytes - start + page - 1) // page
    vec = (ctypes.c_ubyte * n)()
    assert libc.mincore(start, n * page, vec) == 0, ctypes.get_errno()
    return sum(v & 1 for v in vec) / n


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_POPULATE_WRITE and mincore: Linux")
@pytest.mark.parametrize("kv_dtype,blocks", [("float16", 1100), ("mixed", 2200)])
def test_the_kv_arrays_are_resident_once_constructed(kv_dtype, blocks):
    """No first write of a decode step faults in a page: once wait_resident returns, every page of every large
    array is mapped, and the arrays still hold zeros. K and V here are larger than glibc's largest mmap threshold
    (32 MiB), so numpy gets fresh, unmapped memory for them: without the commit almost none of it is resident."""
    kv = KVPages(2, blocks, 8, 64, kv_dtype)  # K and V: 36 MB each (f16, int8), mixed's hot f32 copies too
    kv.wait_resident()
    arrays = [kv.k, kv.v] + ([kv.ks, kv.vs, kv.kh, kv.vh] if kv.ks is not None else [])
    assert min(kv.k.nbytes, kv.v.nbytes) > 32 << 20
    for a in arrays:
        if a.nbytes >= COMMIT_MIN_BYTES:
            assert _resident_fraction(a) == 1.0
    assert not any(a.any() for a in arrays)
    kv.wait_resident()  # again: at once
