"""no_compile(): numba kernels refuse to compile (WouldCompile) on the guarded thread only; the hybrid
KernelSet's slots then run the numpy reference."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from numba import njit

from modelc.kernels.hybrid import Switch, _Slot, hybrid_kernel_set
from modelc.kernels.runtime.nocompile import WouldCompile, install, no_compile


def test_guard_refuses_a_compile_on_its_thread_only():
    assert install()

    @njit(nogil=True)
    def plus_one(x):
        return x + 1

    with no_compile(), pytest.raises(WouldCompile):
        plus_one(1)
    done = []
    with no_compile():  # another thread is not guarded: it compiles
        t = threading.Thread(target=lambda: done.append(plus_one(1)))
        t.start()
        t.join()
        assert done == [2]
        assert plus_one(2) == 3  # compiled in memory now: runs under the guard
        with pytest.raises(WouldCompile):
            plus_one(1.5)  # another signature would compile
    assert plus_one(1.5) == 2.5


def test_slot_runs_the_reference_until_numba_is_compiled():
    @njit(nogil=True)
    def fast(out, x):
        out[:] = x * 2

    def ref(out, x):
        out[:] = x * 2

    sw = Switch()
    slot = _Slot(fast, ref, sw)
    x, out = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
    slot(out, x)
    assert (sw.ref_calls, sw.numba_calls) == (1, 0) and out.tolist() == [0, 2, 4, 6]
    fast(out, x)  # compiled elsewhere (the warmer thread, in the engine)
    slot(out, x)
    assert (sw.ref_calls, sw.numba_calls) == (1, 1)
    sw.numba_only()
    slot(out, x)
    assert (sw.ref_calls, sw.numba_calls) == (1, 1)  # straight to numba, not counted


def test_hybrid_set_has_every_slot():
    ks, sw = hybrid_kernel_set()
    assert ks.name == "hybrid" and ks.matmul.switch is sw and ks.paged_attention.switch is sw


def test_load_only_loads_from_the_disk_cache_and_refuses_to_compile(tmp_path):
    import importlib.util

    from modelc.kernels.runtime.nocompile import load_only

    src = tmp_path / "cached_kernels.py"
    src.write_text("from numba import njit\n\n@njit(cache=True, nogil=True)\ndef inner(x):\n    return x * 2\n\n"
                   "@njit(cache=True, nogil=True)\ndef outer(x):\n    return inner(x) + 1\n")  # fmt: skip

    def fresh():  # a new import of the file: dispatchers with nothing in memory, numba's disk cache shared
        spec = importlib.util.spec_from_file_location(f"cached_kernels_{len(seen)}", src)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        seen.append(mod)
        return mod

    seen: list = []
    with load_only(), pytest.raises(WouldCompile, match="outer"):
        fresh().outer(3)  # nothing cached: outer (and inner inside it) would compile
    assert fresh().outer(3) == 7  # compiles, and numba writes its cache
    with load_only():
        assert fresh().outer(4) == 9  # a new dispatcher: loaded from the disk cache, not compiled
        with pytest.raises(WouldCompile):
            seen[-1].outer(1.5)  # another signature would compile
    assert seen[-1].outer(1.5) == 4.0
