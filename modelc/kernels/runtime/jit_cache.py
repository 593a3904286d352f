"""Where numba caches modelc's compiled kernels: one folder per (modelc version, kernels' source, CPU flags).

numba's own cache sits next to each source file (or in a user folder keyed by the file's absolute
path) and checks each file on its own (its content from numba 0.61 on, its mtime before). That loses
the cache when modelc is installed again into another environment, and it keeps stale machine code
in two cases: a kernel that inlined a numba function from another file that changed, and the
MODELC_NO_* switches of cpu.py (module constants compiled into the kernels, which numba's index does
not key on). So every kernel of modelc/kernels is cached in

    ROOT/<version>-<digest of every kernels/**/*.py but NOT_COMPILED>-<cpu.py's flags>/

with that whole key as the source stamp numba checks: it holds across restarts and reinstalls of the
same code (any path, any mtime), and any change of version, kernel source or switch starts a new,
separate folder. ROOT: $NUMBA_CACHE_DIR if set, else $XDG_CACHE_HOME/modelc/kernels (~/.cache/...);
in the default ROOT only the KEEP most recently used folders are kept. Where ROOT is not writable,
numba's own locators apply (as before). install() runs from modelc/kernels/__init__.py, before any
kernel is decorated (numba picks a function's cache folder when it is decorated).
"""

from __future__ import annotations

import functools
import hashlib
import os
import pathlib
import shutil
import tempfile

try:
    import fcntl
except ImportError:  # Windows: saves stay unlocked, as numba's own
    fcntl = None  # type: ignore[assignment]

KERNELS = pathlib.Path(__file__).resolve().parents[1]
# The modules of kernels/ (paths below it) that compile nothing (the cache machinery, the compile guard, the
# hybrid set, the warm lists and the huge-page mover): editing them keeps every compiled kernel valid, so they are
# not part of the key (tests/kernels/runtime/test_jit_cache.py checks that none defines a numba function).
NOT_COMPILED = frozenset(
    {
        "runtime/jit_cache.py",
        "runtime/nocompile.py",
        "runtime/compile_watch.py",
        "hybrid.py",
        "runtime/warm_list.py",
        "runtime/hugepages.py",
        "runtime/packs.py",
    }
)
KEEP = 32  # ~10 MiB each; a shared dev machine has a folder per worktree and per kernel edit
_installed = False


def user_cache() -> pathlib.Path:
    """modelc's folder in the user's cache: $XDG_CACHE_HOME/modelc (~/.cache/modelc)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "modelc"


def cache_root() -> pathlib.Path:
    """$NUMBA_CACHE_DIR if set, else $XDG_CACHE_HOME/modelc/kernels."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return pathlib.Path(os.environ["NUMBA_CACHE_DIR"])
    return user_cache() / "kernels"


@functools.lru_cache(maxsize=1)
def cache_key() -> str:
    """'<version>-<12 hex of the kernels' source digest>-<cpu flags>', e.g. '0.1.0-3fa2...-avx2.vnni.avx512'."""
    from modelc.kernels.runtime import cpu
    from modelc.version import __version__

    h = hashlib.sha256()
    for f in sorted(KERNELS.rglob("*.py")):
        name = f.relative_to(KERNELS).as_posix()
        if name in NOT_COMPILED:
            continue
        h.update(name.encode() + b"\0" + f.read_bytes() + b"\0")
    flags = [n.removeprefix("HAS_").lower() for n, on in cpu.describe().items() if on and n != "WIDE_DOT_EXACT"]
    return f"{__version__}-{h.hexdigest()[:12]}-{'.'.join(flags) or 'portable'}"


@functools.lru_cache(maxsize=1)
def cache_dir() -> pathlib.Path:
    """This process's folder (created; the default root's least recently used folders beyond KEEP removed)."""
    path = cache_root() / cache_key()
    new = not path.is_dir()
    path.mkdir(parents=True, exist_ok=True)
    os.utime(path)  # "recently used", for the pruning below
    if new and not os.environ.get("NUMBA_CACHE_DIR"):
        _prune(path.parent)
    return path


def _prune(root: pathlib.Path) -> None:
    try:
        dirs = sorted((d for d in root.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime, reverse=True)
    except OSError:
        return
    for d in dirs[KEEP:]:
        shutil.rmtree(d, ignore_errors=True)


@functools.cache
def _ours(py_file: str) -> bool:
    """Whether py_file is one of modelc/kernels/**/*.py (once per file: ~100 kernels are decorated at import)."""
    return KERNELS.is_dir() and pathlib.Path(os.path.realpath(py_file)).is_relative_to(KERNELS)


@functools.lru_cache(maxsize=1)
def _writable() -> bool:
    """Whether this process's cache folder exists and takes files (checked once, not per kernel)."""
    try:
        tempfile.TemporaryFile(dir=cache_dir()).close()
    except OSError:
        return False
    return True


def _locator_class():
    from numba.core import caching

    class KernelCacheLocator(caching._CacheLocator):
        """numba cache locator for the functions of modelc/kernels/**/*.py (others: numba's own)."""

        def __init__(self, py_func, py_file) -> None:
            self._lineno = py_func.__code__.co_firstlineno
            self._py_file = py_file  # numba's warning that a function cannot be cached names it

        def get_cache_path(self) -> str:
            return str(cache_dir())

        def get_source_stamp(self) -> str:
            return cache_key()  # the whole kernels tree's content: not mtimes, not this file alone

        def get_disambiguator(self) -> str:
            return str(self._lineno)

        @classmethod
        def from_function(cls, py_func, py_file):
            if not _ours(py_file) or not _writable():
                return None  # another package's function, kernels imported from a zip, or a read-only cache
            return cls(py_func, py_file)

    return KernelCacheLocator


def _locked_save(save):
    """numba's IndexDataCacheFile.save under an exclusive lock of the cache folder, for modelc's folders.

    numba saves an overload by reading the function's index, adding its key (and picking the next free data
    file name) and writing the index back, with no lock. Several processes compile into one folder at once
    (a cold start's helper processes beside the server, test workers): two saves of one function that overlap
    keep only the later index, so the other overload is lost (the next start compiles it again, and its warm
    list no longer replays), and both may pick the same data file, leaving an index entry that names the
    other overload's code. Under the lock each save reads the index the previous one wrote."""

    def locked(self, key, data):
        path = getattr(self, "_cache_path", "")
        if fcntl is None or not str(path).startswith(str(cache_root())):
            return save(self, key, data)
        try:
            fd = os.open(os.path.join(path, ".save.lock"), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return save(self, key, data)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return save(self, key, data)
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    return locked


def install() -> None:
    """Apply a kernel pack where one fits (packs.setup), put the kernels' locator first in numba's list and lock
    its saves (once per process)."""
    global _installed
    if _installed:
        return
    from modelc.kernels.runtime import packs

    # pins a shipped level's CPU name and features before any kernel is decorated (packs.py)
    packs.setup(cache_key, cache_dir)
    from numba.core import caching

    impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl  # renamed in recent numba
    impl._locator_classes.insert(0, _locator_class())
    caching.IndexDataCacheFile.save = _locked_save(caching.IndexDataCacheFile.save)
    _installed = True
