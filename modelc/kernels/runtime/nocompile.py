"""no_compile(): a thread-local promise that numba compiles (or loads from its disk cache) nothing;
load_only(): the same for compiling, while loading from numba's disk cache goes on as usual.

Inside `with no_compile():`, calling a numba kernel that has no compiled overload for its argument
types in this process raises WouldCompile instead of compiling: the caller then takes another path
(kernels/hybrid.py: the numpy reference) while a background thread compiles. Other threads are not
affected. An overload already in memory runs as usual (numba's C dispatcher finds it without
reaching Python).

NOTE: numba has no public hook for this; on a miss its C dispatcher calls the Python method
`_compile_for_args`, which is wrapped here once (install()). If a numba version lacks that method,
install() returns False and callers must not rely on the guard (hybrid.py then compiles as before).
load_only() listens to numba's public "numba:compile" event, which fires after a disk-cache miss, just before
numba compiles: the listener raises there, so nothing is compiled and every kernel the cache had stays loaded.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

_state = threading.local()
_lock = threading.Lock()
_installed: bool | None = None


class WouldCompile(Exception):
    """A numba kernel would have compiled (or loaded from the disk cache) inside no_compile(), or would have
    compiled inside load_only()."""


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


@contextmanager
def load_only() -> Iterator[None]:
    """Within: numba kernels called on this thread load from numba's disk cache (or run, if in memory) as usual,
    but one that would have to be compiled raises WouldCompile (naming it) instead. A warm start uses it to
    find out, without compiling, whether every kernel it needs is cached (engine/warm.py)."""
    _listen()
    prev = getattr(_state, "load_only", False)
    _state.load_only, _state.refused = True, None
    try:
        yield
    except WouldCompile:
        raise
    except Exception as e:
        # the refusal may come back wrapped: raised inside a caller's type inference, numba reports it as
        # that caller's typing or internal error
        if _state.refused is not None:
            raise WouldCompile(_state.refused) from e
        raise
    finally:
        _state.load_only = prev


_listening = False


def _listen() -> None:
    global _listening
    with _lock:
        if _listening:
            return
        from numba.core import event

        class _Refuse(event.Listener):
            def on_start(self, ev) -> None:
                if getattr(_state, "load_only", False):
                    func = getattr(ev.data.get("dispatcher"), "py_func", None)
                    _state.refused = getattr(func, "__qualname__", "a kernel")
                    raise WouldCompile(_state.refused)

            def on_end(self, ev) -> None:
                pass

        event.register("numba:compile", _Refuse())
        _listening = True
