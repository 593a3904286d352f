"""The warm list: which compiled kernel signatures a model's warmup reached, so a warm start loads exactly
those from numba's disk cache by signature instead of running forwards to reach them.

A warmup reaches every kernel by running the model (T=1 and T=2 forwards, the prefill paths on slices):
on a 1.1B Q4_0 model that is ~0.3 CPU-s of arithmetic on top of loading ~16 cached kernels. After a
warmup, snapshot() lists (module, function, argument types) for every overload of modelc's kernels in
this process; a later start of the same model calls `dispatcher.compile(argtypes)` for each
(replay()), which loads it from numba's cache and runs nothing.

A list is kept per key (the model file's identity, the KV type, the threads, the draft model: what decides
which kernels a forward reaches) in jit_cache's folder, which is already specific to modelc's version,
its kernels' source and the CPU flags; the key adds a digest of the rest of the package's source, so a
change to the code that picks kernels starts a new list. A kernel the list misses, or that the cache no
longer holds, is simply compiled by the warmup that follows a failed or partial replay.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import importlib
import os
import pathlib
import pickle
import sys
from typing import Any

from modelc import tmpfiles
from modelc.kernels.runtime import jit_cache

PACKAGE = pathlib.Path(__file__).resolve().parents[2]
FORMAT = "1"
KEEP = 64  # lists kept per cache folder (the most recently written): tests write one per temporary model file

Entry = tuple[str, str, tuple[Any, ...]]  # (module, function name, argument types)


@functools.lru_cache(maxsize=1)
def package_digest() -> str | None:
    """Digest of modelc's Python source (~8 ms); None where the package is not plain files (a frozen app)."""
    files = sorted(PACKAGE.rglob("*.py"))
    if not files:
        return None
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(PACKAGE)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def key(*parts: Any) -> str | None:
    """The list's key for these parts (plain values with stable reprs), or None where lists are not kept."""
    digest = package_digest()
    if digest is None:
        return None
    return hashlib.sha256(repr((FORMAT, digest, parts)).encode()).hexdigest()[:32]


def _path(k: str) -> pathlib.Path:
    return jit_cache.cache_dir() / "warm-lists" / f"{k}.pkl"


def _dispatchers() -> list[tuple[str, str, Any]]:
    """(module, name, dispatcher) for every numba dispatcher defined at the top of a modelc.kernels module."""
    from numba.core.dispatcher import Dispatcher

    out = []
    for name, mod in list(sys.modules.items()):
        if mod is None or not name.startswith("modelc.kernels."):
            continue
        for attr, obj in list(vars(mod).items()):
            if isinstance(obj, Dispatcher) and getattr(obj.py_func, "__module__", None) == name:
                out.append((name, attr, obj))
    return out


def _cached(disp: Any) -> bool:
    """Whether the dispatcher keeps its overloads in numba's disk cache (cache=True). One that does not (e.g.
    decode_layer._not_in_kinds, compiled only into its callers' cached code) would compile again at every
    replay, which then counts as failed: a cold process's list would never replay."""
    from numba.core.caching import NullCache

    return not isinstance(getattr(disp, "_cache", None), NullCache)


def snapshot() -> list[Entry] | None:
    """Every compiled overload of modelc's kernels in this process; None if one of them belongs to a
    dispatcher that cannot be found again by module and name (the list would be incomplete). Functions
    local to another (the implementations of `@overload`s) are compiled only into the kernels that call
    them, never called from Python, so they need no entry; modelc defines no kernel inside a function."""
    from numba.core.dispatcher import Dispatcher

    named = _dispatchers()
    known = {id(d) for _, _, d in named}
    for obj in gc.get_objects():
        try:
            found = isinstance(obj, Dispatcher)
        except ReferenceError:  # a weakref.proxy whose object is gone (isinstance asks it for __class__)
            continue
        if found and obj.overloads and id(obj) not in known:
            func = obj.py_func
            ours = str(getattr(func, "__module__", "")).startswith("modelc.kernels")
            if ours and "<locals>" not in getattr(func, "__qualname__", ""):
                return None
    return [(m, a, tuple(sig)) for m, a, d in named if _cached(d) for sig in list(d.overloads)]


def save(k: str, entries: list[Entry]) -> None:
    """Write the list (temp file + rename); a cache that cannot be written is no error."""
    path = _path(k)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tmpfiles.make(path.parent, path.name)
        with os.fdopen(fd, "wb") as f:
            pickle.dump(entries, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
        tmp = None
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        return
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
    prune(path.parent)


def prune(folder: pathlib.Path, pattern: str = "*.pkl", keep: int | None = None) -> None:
    """Remove the files of `folder` matching `pattern` beyond the `keep` (default KEEP) most recently written (best
    effort)."""
    keep = KEEP if keep is None else keep
    try:
        files = sorted(folder.glob(pattern), key=lambda f: f.stat().st_mtime, reverse=True)
        for f in files[keep:]:
            f.unlink(missing_ok=True)
    except OSError:
        return


def load(k: str) -> list[Entry] | None:
    """The list saved under k, or None (absent, unreadable, or written by another numba)."""
    try:
        with open(_path(k), "rb") as f:
            entries = pickle.load(f)  # the user's own cache folder, like numba's pickled index beside it
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError, TypeError, ValueError):
        return None
    return entries if isinstance(entries, list) else None


def replay(entries: list[Entry]) -> bool:
    """Load every listed overload (from numba's disk cache; compiling one the cache lacks). False if an entry
    names a kernel that no longer exists; the caller then warms up the usual way."""
    for module, name, argtypes in entries:
        try:
            disp = getattr(importlib.import_module(module), name)
            disp.compile(argtypes)
        except (ImportError, AttributeError, TypeError):
            return False
    return True
