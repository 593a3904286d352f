"""A disk cache of the weights repacked for gemm_r16: a later start maps them instead of repacking.

Repacking at load reads every matrix, permutes its bytes and fills fresh memory: ~1-1.5 s of a 1.1B
Q4_0 model's warm start on 2 cores, most of it. So when a model file's matrices have been repacked,
the arrays are written once, by a background thread, to one file per model file:

    $MODELC_REPACK_CACHE_DIR (default $XDG_CACHE_HOME/modelc/repacked, i.e. ~/.cache/...) / <key>.r16

key = a digest of the model file's identity (real path, inode, size, mtime) and jit_cache.cache_key()
(modelc's version, its kernels' source, the CPU flags: what decides the layout). A later load of the
same file maps it copy-on-write (so the arrays are writable, the types numba compiled for; nothing
writes them) and takes each repacked array from it by where its source bytes sit in the model file.
The pages come from the page cache, as the model file's own do: shared between processes, dropped
under memory pressure and read again.

Only the KEEP most recently used files are kept, and a file is written only where it leaves at least
its own size free on the disk. MODELC_REPACK_CACHE=0 turns the cache off. Writes are a temp file and
a rename (modelc.tmpfiles); a file that does not parse is ignored (and replaced).

File: MAGIC, u64 header length, a JSON header {"format", "entries": [[name, offset, [shape]], ...]},
then each array at its offset (page-aligned).
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import struct
import threading
from collections.abc import Sequence

import numpy as np

from modelc import tmpfiles
from modelc.ir import DataType
from modelc.kernels.matmul import gemm_r16
from modelc.kernels.runtime import hugepages, jit_cache

MAGIC = b"MODELC-R16\0\0"
FORMAT = 1
KEEP = 3
ALIGN = 4096
_HEAD = struct.Struct("<Q")

_lock = threading.Lock()
_stores: dict[str, Store] = {}  # sidecar path -> its store (this process)
_writers: list[threading.Thread] = []


def cache_dir() -> pathlib.Path:
    if os.environ.get("MODELC_REPACK_CACHE_DIR"):
        return pathlib.Path(os.environ["MODELC_REPACK_CACHE_DIR"])
    return jit_cache.user_cache() / "repacked"


def enabled() -> bool:
    return os.environ.get("MODELC_REPACK_CACHE", "1") != "0"


def repacked(parts: Sequence[np.ndarray], dtype: DataType) -> np.ndarray | None:
    """gemm_r16's layout of the source blocks `parts` ((N, row bytes) views of a model file; several for a
    fused run: their groups one after the other): from the cache file of that model file when it has it,
    else repacked from the file (and kept for the cache file). None where a fused run's parts do not repack
    to one row of bytes per 16-row group (they cannot be concatenated)."""
    found = _locate(parts) if enabled() else None
    if found is not None:
        store, name = found
        name = f"{dtype.name}@{name}"
        got = store.get(name)
        if got is not None:
            return got
    got = _repack(parts, dtype)
    if found is not None and got is not None:
        store.add(name, got)
    return got


def flush(wait: bool = False) -> None:
    """Write, in the background, each cache file that gained arrays since it was read (after a model is
    built). wait=True: return when every write has ended (tests, short-lived tools)."""
    with _lock:
        stores = list(_stores.values())
    for s in stores:
        s.flush()
    if wait:
        with _lock:
            writers = list(_writers)
        for t in writers:
            t.join()


def _repack(parts: Sequence[np.ndarray], dtype: DataType) -> np.ndarray | None:
    """repacked() without the cache: each part read from the file with pread as a private copy (the file's
    own pages stay out of RSS: the copy takes their place), repacked, the parts' groups concatenated."""
    packed = [gemm_r16.repack(hugepages.read_copy(b.reshape(-1)).reshape(b.shape), dtype) for b in parts]
    if len(packed) == 1:
        return packed[0]
    if any(p.ndim != 2 or p.shape[0] * gemm_r16.GROUP != b.shape[0] for p, b in zip(packed, parts, strict=True)):
        return None
    return np.concatenate(packed)  # (sum N / 16, group bytes)


def _locate(parts: Sequence[np.ndarray]) -> tuple[Store, str] | None:
    """(the store of the file these views map, their place in it as a name) or None (not a file's view)."""
    files, places = set(), []
    for p in parts:
        got = hugepages.file_place(p) if p.flags.c_contiguous else None  # (file name, byte offset)
        if got is None:
            return None
        files.add(got[0])
        places.append(f"{got[1]}+{p.nbytes}")
    if len(files) != 1:
        return None
    (path,) = files
    try:
        st = os.stat(path)
    except OSError:
        return None
    ident = repr((os.path.realpath(path), st.st_ino, st.st_size, st.st_mtime_ns, jit_cache.cache_key(), FORMAT))
    side = str(cache_dir() / (hashlib.sha256(ident.encode()).hexdigest()[:32] + ".r16"))
    with _lock:
        store = _stores.get(side)
        if store is None:
            store = _stores[side] = Store(pathlib.Path(side))
    return store, ",".join(places)


class Store:
    """One cache file: the arrays it holds (mapped) and the ones this process made for it since."""

    def __init__(self, path: pathlib.Path):
        self.path = path
        self.mapped = _read(path)
        self.made: dict[str, np.ndarray] = {}
        self.lock = threading.Lock()
        self.writing = False

    def get(self, name: str) -> np.ndarray | None:
        with self.lock:
            got = self.mapped.get(name)
            return got if got is not None else self.made.get(name)

    def add(self, name: str, a: np.ndarray) -> None:
        with self.lock:
            self.made[name] = a

    def flush(self) -> None:
        with self.lock:
            if not self.made or self.writing:
                return
            entries = {**self.mapped, **self.made}
            self.writing = True
        t = threading.Thread(target=self._write, args=(entries,), name="modelc-r16-cache", daemon=True)
        with _lock:
            _writers[:] = [w for w in _writers if w.is_alive()]
            _writers.append(t)
        t.start()

    def _write(self, entries: dict[str, np.ndarray]) -> None:
        try:
            if _write(self.path, entries):
                mapped = _read(self.path)  # from now on the arrays come from the file, the copies can go
                with self.lock:
                    if set(mapped) >= set(self.made):
                        self.mapped, self.made = mapped, {}
        except OSError:
            pass  # a cache: a full disk or a read-only home just means the next start repacks again
        finally:
            with self.lock:
                self.writing = False


def _read(path: pathlib.Path) -> dict[str, np.ndarray]:
    """The arrays of a cache file, mapped copy-on-write; {} when it is missing or does not parse.

    The arrays are views of an np.memmap of the file (mode c: nothing writes them), so hugepages.promote can
    move their pages onto huge pages in place."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < len(MAGIC) + _HEAD.size:
                return {}
            m = np.memmap(f, np.uint8, mode="c", shape=(size,))
    except (OSError, ValueError):
        return {}
    try:
        if m[: len(MAGIC)].tobytes() != MAGIC:
            return {}
        (n,) = _HEAD.unpack_from(m, len(MAGIC))
        start = len(MAGIC) + _HEAD.size
        if n > size - start:
            return {}
        header = json.loads(m[start : start + n].tobytes())
        if header.get("format") != FORMAT:
            return {}
        out = {}
        for name, offset, shape in header["entries"]:
            count = int(np.prod(shape))
            if not (isinstance(offset, int) and offset % ALIGN == 0 and 0 < offset and offset + count <= size):
                return {}
            out[str(name)] = m[offset : offset + count].reshape(shape)
        try:
            os.utime(path)  # recently used: pruning keeps it
        except OSError:  # a read-only cache folder (an image): still readable
            pass
        return out
    except (ValueError, KeyError, TypeError, OSError):
        return {}


def _write(path: pathlib.Path, entries: dict[str, np.ndarray]) -> bool:
    """Write the cache file (temp file + rename) and prune the folder; False when there is no room."""
    path.parent.mkdir(parents=True, exist_ok=True)
    names, first = sorted(entries), ALIGN
    while True:  # the arrays start after the header, whose length depends on their offsets
        layout, offset = [], first
        for n in names:
            layout.append([n, offset, list(entries[n].shape)])
            offset = _aligned(offset + entries[n].nbytes)
        header = json.dumps({"format": FORMAT, "entries": layout}).encode()
        if len(MAGIC) + _HEAD.size + len(header) <= first:
            break
        first = _aligned(len(MAGIC) + _HEAD.size + len(header))
    if shutil.disk_usage(path.parent).free < 2 * offset:
        return False
    tmpfiles.sweep(path.parent)
    fd, tmp = tmpfiles.make(path.parent, path.name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC + _HEAD.pack(len(header)) + header)
            for n, off, _ in layout:
                f.seek(off)
                f.write(memoryview(np.ascontiguousarray(entries[n])).cast("B"))
            f.truncate(offset)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _prune(path.parent)
    return True


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _prune(folder: pathlib.Path) -> None:
    """Keep the KEEP most recently used files (another process may be pruning too)."""
    dated = []
    for f in folder.glob("*.r16"):
        try:
            dated.append((f.stat().st_mtime, f))
        except OSError:
            continue
    for _, old in sorted(dated, reverse=True)[KEEP:]:
        old.unlink(missing_ok=True)
