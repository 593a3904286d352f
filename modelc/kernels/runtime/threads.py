"""Compute thread budgets: numba's (per calling thread) and the BLAS numpy uses (OpenBLAS, process-wide).

A Runner's `threads` must bound sgemm as well as the numba kernels: OpenBLAS's count is process-wide. On a busy machine its spinning worker threads can make a
small sgemm 50x slower (measured: a 64-token prefill of a 2-layer model, 176 ms vs 2 ms),
so the engine's thread budget must cover BLAS as well as numba. No numba here.
"""

from __future__ import annotations

import ctypes
import re
import threading

from modelc import spin

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_prefix = ""
_looked = False
_current: int | None = None

_PREFIXES = ("scipy_openblas_", "openblas_")
_SUFFIXES = ("64_", "")


def _find_lib() -> tuple[ctypes.CDLL | None, str]:
    """numpy's OpenBLAS and the prefix/suffix its thread functions carry (scipy-openblas renames them)."""
    import numpy  # noqa: F401  (loads numpy's BLAS into the process)

    try:
        with open("/proc/self/maps") as f:
            paths = sorted(set(re.findall(r"(/\S*openblas\S*\.so\S*)", f.read())))
    except OSError:
        return None, ""
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for pre in _PREFIXES:
            for suf in _SUFFIXES:
                if hasattr(lib, f"{pre}set_num_threads{suf}") and hasattr(lib, f"{pre}get_num_threads{suf}"):
                    return lib, f"{pre}{{}}_num_threads{suf}"
    return None, ""


def _fn(kind: str):
    global _lib, _prefix, _looked
    if not _looked:
        _lib, _prefix = _find_lib()
        _looked = True
    if _lib is None:
        return None
    return getattr(_lib, _prefix.format(kind))


def set_blas_threads(n: int) -> bool:
    """Use n BLAS threads from now on; False when numpy's BLAS is not an OpenBLAS we can reach."""
    global _current
    if _current == n:  # the usual case, every engine step (_current is set only once a call went through)
        return True
    with _lock:
        fn = _fn("set")
        if fn is None:
            return False
        if _current != n:
            fn.argtypes, fn.restype = [ctypes.c_int], None
            fn(int(n))
            _current = int(n)
        return True


def get_blas_threads() -> int | None:
    """OpenBLAS's current thread count, or None when unreachable."""
    with _lock:
        fn = _fn("get")
        if fn is None:
            return None
        fn.argtypes, fn.restype = [], ctypes.c_int
        return int(fn())


def default_threads() -> int:
    """numba's thread count when nobody set one (NUMBA_NUM_THREADS: the usable CPUs by default)."""
    import numba

    return int(numba.config.NUMBA_NUM_THREADS)


def kernel_threads() -> int:
    """numba's thread count for kernels called from this thread."""
    import numba

    return int(numba.get_num_threads())


def set_kernel_threads(n: int) -> None:
    """n threads for numba kernels called from this thread (BLAS's count unchanged)."""
    import numba

    n = max(1, min(int(n), numba.config.NUMBA_NUM_THREADS))
    if numba.get_num_threads() != n:  # every engine step asks; most keep the count
        numba.set_num_threads(n)


def blas_threads_for(n: int) -> int:
    """OpenBLAS's process-wide thread count for a budget of n threads: n where its idle workers stop spinning
    within ~25 us of a call (modelc set OPENBLAS_THREAD_TIMEOUT before numpy loaded OpenBLAS, or the user set
    it), else 1. With numpy imported before modelc each worker spins ~0.1 s after every call, holding a core
    that the numba kernels between BLAS calls need: prefill of 128 tokens, TinyLlama Q4_0 80 against 194
    tok/s, a Qwen3-MoE-shaped model 78 against 613 (its routers' sgemm runs between the expert kernels of
    every layer); on one BLAS thread (which runs in the caller) 221 and 504. The float matmuls that sgemm
    carries (gemm_blas) still take numba's count per call."""
    return int(n) if spin.BLAS_SPIN_BOUNDED else 1


def set_compute_threads(n: int) -> None:
    """n threads for numba kernels called from this thread, and for BLAS (process-wide; blas_threads_for)."""
    set_kernel_threads(n)
    set_blas_threads(blas_threads_for(n))
