"""watch_compiles(callback): hear of every numba compile that starts on the calling thread (the warm-up's "did
this compile anything?"). The engine asks here, so only the kernels package imports numba."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def watch_compiles(on_start: Callable[[], None]) -> Callable[[], None]:
    """Call `on_start()` whenever numba starts compiling a function on this thread; returns the function that
    stops listening (call it in a `finally`)."""
    from numba.core import event

    me = threading.get_ident()

    class _OnCompile(event.Listener):
        def on_start(self, ev: Any) -> None:
            if threading.get_ident() == me:
                on_start()

        def on_end(self, ev: Any) -> None:
            pass

    listener = _OnCompile()
    event.register("numba:compile", listener)
    return lambda: event.unregister("numba:compile", listener)
