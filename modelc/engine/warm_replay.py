"""A warm start without warmup forwards: replay the kernel list a previous warmup of the same model left
(kernels/runtime/warm_list.py) and skip running the model, when every listed kernel loads from numba's cache.

    key = list_key(runner)          # None: a model that is not a file, or a frozen app
    if replayed(key): ...           # every kernel of the list loaded, nothing compiled on this thread
    else: runner.warmup(); record(key)
"""

from __future__ import annotations

import os
import threading
from typing import Any

from modelc.kernels.runtime import warm_list


def _file_identity(source: Any) -> tuple[Any, ...] | None:
    """(real path, offset, length, size, mtime_ns) of a model mapped from a file, else None."""
    path = getattr(source, "path", None)
    if not path:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    offset, length = int(getattr(source, "offset", 0) or 0), int(getattr(source, "file_size", 0) or 0)
    return (os.path.realpath(path), offset, length, st.st_size, st.st_mtime_ns)


def list_key(runner: Any) -> str | None:
    """What decides which kernels the runner's forwards reach: its model file, KV type, threads, draft."""
    target = _file_identity(runner.source)
    if target is None:
        return None
    drafter = getattr(runner, "drafter", None)
    draft = None if drafter is None else _file_identity(drafter.source)
    if drafter is not None and draft is None:
        return None
    # the thread count matters only as one or several (attention's parallel kernel needs two threads), so
    # `modelc warmup` (numba's default threads) leaves the list a server with --threads 2 replays
    from numba import config

    threads = runner.threads or config.NUMBA_NUM_THREADS
    return warm_list.key(target, draft, str(runner.kv.kv_dtype), "parallel" if threads > 1 else "serial")


def replayed(key: str | None) -> bool:
    """Whether the list saved under key loaded every kernel it names without compiling any (on this thread)."""
    entries = None if key is None else warm_list.load(key)
    if not entries:
        return False
    from numba.core import event

    me, compiled = threading.get_ident(), []

    class _OnCompile(event.Listener):
        def on_start(self, ev: Any) -> None:
            if threading.get_ident() == me:
                compiled.append(ev)

        def on_end(self, ev: Any) -> None:
            pass

    listener = _OnCompile()
    event.register("numba:compile", listener)
    try:
        ok = warm_list.replay(entries)
    except Exception:  # noqa: BLE001 - numba could not load one (e.g. a corrupt cache file): warm up as usual
        ok = False
    finally:
        event.unregister("numba:compile", listener)
    return ok and not compiled


def record(key: str | None) -> None:
    """Save the kernels this process has compiled or loaded as the list for key (after a complete warmup)."""
    if key is None:
        return
    try:
        entries = warm_list.snapshot()
    except Exception:  # noqa: BLE001 - best effort: a list not written only costs the next start its warmup
        return
    if entries:
        warm_list.save(key, entries)
