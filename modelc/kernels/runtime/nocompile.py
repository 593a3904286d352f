"""no_compile(): a thread-local promise that numba compiles (or loads from its disk cache) nothing.

Inside `with no_compile():`, calling a numba kernel that has no compiled overload for its argument
types in this process raises WouldCompile instead of compiling: the caller then takes another path
(kernels/hybrid.py: the numpy reference) while a background thread compiles. Other threads are not
affected. An overload already in memory runs as usual (numba's C dispatcher finds it without
reaching Python).

NOTE: numba has no public hook for this; on a miss its C dispatcher calls the Python method
`_compile_for_args`, which is wrapped here once (install()). If a numba version lacks that method,
install() returns False and callers must not rely on the guard (hybrid.py then compiles as before).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

_state = threading.local()
_lock = threading.Lock()
_installed: bool | None = None


class WouldCompile(Exception):
    """A numba kernel would have compiled (or loaded from the disk cache) inside no_compile()."""


def install() -> bool:
    """Wrap numba's compile-on-miss entry once; False where this numba has no such entry."""
    global _installed
    with _lock:
        if _installed is None:
            _installed = _wrap()
        return _installed


def _wrap() -> bool:
    try:
        from numba.core.dispatcher import _DispatcherBase
    except ImportError:
        return False
    orig = getattr(_DispatcherBase, "_compile_for_args", None)
    if orig is None:
        return False

    def _compile_for_args(self, *args, **kws):
        if getattr(_state, "on", False):
            raise WouldCompile(getattr(getattr(self, "py_func", None), "__qualname__", repr(self)))
        return orig(self, *args, **kws)

    _DispatcherBase._compile_for_args = _compile_for_args
    return True


@contextmanager
def no_compile() -> Iterator[None]:
    """Within: numba kernels of this thread run only if already compiled in memory, else WouldCompile."""
    prev = getattr(_state, "on", False)
    _state.on = True
    try:
        yield
    finally:
        _state.on = prev
