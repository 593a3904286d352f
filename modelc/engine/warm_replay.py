"""A warm start without warmup forwards: replay the kernel list a previous warmup of the same model left
(kernels/runtime/warm_list.py) and skip running the model, when every listed kernel loads from numba's cache.

    key = list_key(runner)          # None: a model that is not a file, or a frozen app
    if replayed(key): ...           # every kernel of the list loaded, nothing compiled on this thread
    else: runner.warmup(); record(key)
"""

from __future__ import annotations

import os
from typing import Any

from modelc.kernels.runtime import warm_list
from modelc.kernels.runtime.compile_watch import watch_compiles
from modelc.kernels.runtime.threads import default_threads


def file_identity(source: Any) -> tuple[Any, ...] | None:
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
    target = file_identity(runner.source)
    if target is None:
        return None
    drafter = getattr(runner, "drafter", None)
    draft = None if drafter is None else file_identity(drafter.source)
    if drafter is not None and draft is None:
        return None
    # the thread count matters only as one or several (attention's parallel kernel needs two threads), so
    # `modelc warmup` (numba's default threads) leaves the list a server with --threads 2 replays
    threads = runner.threads or default_threads()
    return warm_list.key(target, draft, str(runner.kv.kv_dtype), "parallel" if threads > 1 else "serial")


def replayed(key: str | None) -> bool:
    """Whether the list saved under key loaded every kernel it names without compiling any (on this thread)."""
    entries = None if key is None else warm_list.load(key)
    if not entries:
        return False
    compiled: list[bool] = []
    unwatch = watch_compiles(lambda: compiled.append(True))
    try:
        ok = warm_list.replay(entries)
    except Exception:  # noqa: BLE001 - numba could not load one (e.g. a corrupt cache file): warm up as usual
        ok = False
    finally:
        unwatch()
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
