"""HashPool: the digests a pack needs (every tensor's BLAKE3, the source file's SHA-256), on worker threads.

A pack hashes each stored tensor (the format's digest, BLAKE3: digest.py) and, with
`--source-hash`, the whole source file (provenance.source_sha256). The pool runs both kinds of
job beside the copy, one chunk at a time per worker (hashlib and blake3 drop the GIL), so every
core hashes while any job has bytes left. A file job is one sequential SHA-256 stream that
cannot be split, the longest job of a pack, so a free worker always takes it first; tensor jobs
fill the rest. A BLAKE3 chunk is itself split across cores (blake3's own threads), so even a
pack of one huge tensor hashes at several GB/s.

NOTE: hashlib, not a two-message SHA-NI kernel: one was written in numba (llvmlite SHA
intrinsics) and measured, and two interleaved streams ran at only 1.3x one stream (the SHA
unit's throughput is the limit); it was removed (git history: modelc/kernels/sha256_ni.py).
That limit is why tensor digests moved to BLAKE3.

Pages of a memory-mapped buffer are dropped from the process after they are hashed
(`release_pages`), and a file job maps its file and drops each chunk the same way, so RSS
stays at a few chunks, not the model size.
"""

from __future__ import annotations

import functools
import mmap
import os
import threading
from typing import Any

import numpy as np

from modelc.artifact.digest import DEFAULT_DIGEST, new_hasher

CHUNK_BYTES = 16 << 20


class HashCancelled(Exception):
    """The job was cancelled before it finished."""


class HashJob:
    """One pending digest (of `kind`): of a (N,) uint8 buffer, or of a whole file."""

    def __init__(self, pool: HashPool, data: np.ndarray | None, path: str | None, kind: str = DEFAULT_DIGEST) -> None:
        self.pool, self.data, self.path = pool, data, path
        self.size = data.size if data is not None else 0
        self.pos = 0
        self.busy = False
        self.cancelled = False
        self.kind = kind
        self.sha = new_hasher(kind)
        self._map: mmap.mmap | None = None
        self._done = threading.Event()
        self._value: str | None = None
        self._error: BaseException | None = None

    def result(self) -> str:
        """The hex digest; waits for it. Re-raises what the worker hit (OSError for a file)."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value

    def cancel(self) -> None:
        """Stop hashing (what was started finishes its chunk); result() then raises HashCancelled."""
        self.pool.cancel(self)

    def _finish(self, value: str | None, error: BaseException | None) -> None:
        self._value, self._error = value, error
        self.data = self._map = None  # the map closes with its last view
        self._done.set()

    def _open(self) -> None:
        """Map the file (first chunk of a file job)."""
        assert self.path is not None
        with open(self.path, "rb") as f:
            self.size = os.fstat(f.fileno()).st_size
            if self.size:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                self.data = np.frombuffer(self._map, dtype=np.uint8)

    def _chunk(self, n: int) -> np.ndarray:
        assert self.data is not None
        return self.data[self.pos : self.pos + n]


class HashPool:
    """Worker threads hashing submitted buffers and files; see the module docstring."""

    def __init__(self, num_workers: int) -> None:
        self._cond = threading.Condition()
        self._jobs: list[HashJob] = []
        for i in range(num_workers):
            threading.Thread(target=self._work, name=f"modelc-hash-{i}", daemon=True).start()

    def submit(self, data: Any, kind: str = DEFAULT_DIGEST) -> HashJob:
        """The digest of a buffer (numpy array or bytes-like; kept referenced, not copied, until hashed)."""
        arr = data if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)
        job = HashJob(self, np.ascontiguousarray(arr).reshape(-1).view(np.uint8), None, kind)
        return self._add(job)

    def submit_file(self, path: str | os.PathLike[str], kind: str = "sha256") -> HashJob:
        """The digest (sha256 by default: provenance) of a whole file, read through a map in order."""
        job = HashJob(self, None, os.fspath(path), kind)
        job.size = -1  # unknown until the worker opens it
        return self._add(job)

    def cancel(self, job: HashJob) -> None:
        with self._cond:
            if job in self._jobs:
                self._jobs.remove(job)
                job.cancelled = True
                if not job.busy:  # else the worker holding it finishes it after its chunk
                    job._finish(None, HashCancelled())
            self._cond.notify_all()

    def _add(self, job: HashJob) -> HashJob:
        if job.size == 0:
            job._finish(job.sha.hexdigest(), None)
            return job
        with self._cond:
            self._jobs.append(job)
            self._cond.notify()
        return job

    def _pick(self) -> HashJob | None:
        """An idle job, marked busy; caller holds the lock. A file job first unless one is being
        hashed already (two packs at once must not starve the tensor jobs); else the oldest."""
        idle = [j for j in self._jobs if not j.busy]
        file_busy = any(j.busy and j.path is not None for j in self._jobs)
        job = next((j for j in idle if j.path is not None and not file_busy), idle[0] if idle else None)
        if job is not None:
            job.busy = True
        return job

    def _hash_chunk(self, job: HashJob) -> int:
        """Hash the job's next chunk (opening a file job first); returns the bytes hashed."""
        if job.path is not None and job.size == -1:
            job._open()
        if job.size <= job.pos:
            return 0
        view = job._chunk(CHUNK_BYTES)
        job.sha.update(view)
        release_pages(view)
        return view.size  # the view dies here: a file job's map closes with its last view

    def _work(self) -> None:
        while True:
            with self._cond:
                while (job := self._pick()) is None:
                    self._cond.wait()
            try:
                n = self._hash_chunk(job)
            except Exception as e:  # noqa: BLE001 - handed to whoever waits on the job
                n, job.pos, job.size, job._error = 0, 0, 0, e
            with self._cond:
                job.busy = False
                if job.cancelled:
                    job._finish(None, HashCancelled())
                else:
                    job.pos += n
                    if job.pos >= job.size:
                        self._jobs.remove(job)
                        job._finish(None if job._error else job.sha.hexdigest(), job._error)
                self._cond.notify_all()


@functools.cache
def hash_pool() -> HashPool:
    """The process's pool: one worker per CPU, at least 2 (one can hold the file job)."""
    return HashPool(max(2, min(8, os.cpu_count() or 2)))


def release_pages(view: np.ndarray) -> None:
    """Drop a read-only file-mapped view's pages from this process (best effort; no-op for other memory).

    NOTE: pages of a mmap'd source count in RSS once touched; without this, packing a 10 GB
    file would grow RSS to 10 GB even though each byte is needed once. The page cache keeps
    the data, so nothing is re-read if the pages are touched again.
    """
    base = view.base
    while base is not None and not isinstance(base, mmap.mmap):
        base = base.obj if isinstance(base, memoryview) else getattr(base, "base", None)
    if base is None or not hasattr(base, "madvise") or view.nbytes == 0:
        return
    try:
        with memoryview(base) as mv:
            if not mv.readonly:  # a copy-on-write or shared writable map: dropping pages loses writes
                return
    except ValueError:  # a closed map
        return
    try:
        start = view.ctypes.data - np.frombuffer(base, dtype=np.uint8).ctypes.data
    except (ValueError, TypeError):  # a closed map
        return
    lo = start // mmap.PAGESIZE * mmap.PAGESIZE
    hi = (start + view.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE  # whole pages only: neighbours stay
    if hi > lo:
        try:
            base.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
        except (OSError, ValueError):
            pass
