"""Streaming a model's layers from its file: read ahead of the forward, drop the layers behind it.

A streamed model (residency.py) keeps its matrices in their file layout on the read-only file mapping. One
worker thread per model owns which layers are in memory: the forward tells it, through its inbox, the layer it
enters (`enter`, which waits until that layer is read) and the layer it has left (`leave`); the worker reads the
next layers ahead (madvise MADV_POPULATE_READ: the kernel reads the file and maps the pages, no copy) while the
current one computes, up to `ring_bytes`, and drops each layer left (MADV_DONTNEED on the mapping, then
posix_fadvise DONTNEED on the file: its page cache is freed, and so uncharged from the memory cgroup). The first
layers that fit the budget beside the ring stay resident: a token reads only the others from disk.

The worker shares nothing with the forward but its two queues (messages: ("want" | "done", position), replies:
the position made ready). Dropping and reading are best effort: a page the kernel evicts or that a drop missed
faults back in from the file; the numbers computed never depend on it. No numba here.
"""

from __future__ import annotations

import collections
import ctypes
import ctypes.util
import mmap
import os
import queue
import threading
import time
import weakref
from dataclasses import dataclass
from errno import EINVAL
from typing import Any

from modelc.kernels.runtime import hugepages
from modelc.models.residency import group_bytes, groups

PAGE = mmap.PAGESIZE
MADV_DONTNEED, MADV_WILLNEED, MADV_POPULATE_READ = 4, 3, 22
RING_GROUPS = 3
"""Layers in flight: the one computing and two read ahead (a layer computes in a fraction of its read time, so
more ahead would only hold memory)."""


@dataclass(frozen=True, slots=True)
class Span:
    """Bytes of one group on the file mapping: [addr, addr + size) maps `path` from `offset`; `keep` is an array
    viewing them, so the mapping lives as long as the worker that reads it."""

    addr: int
    size: int
    path: str
    offset: int
    keep: Any = None


def _libc() -> Any:
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)  # CDLL: calls drop the GIL
        lib.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        lib.madvise.restype = ctypes.c_int
        return lib
    except (OSError, AttributeError):
        return None


_LIBC = _libc()


def spans_of(source: Any, names: list[str]) -> list[Span]:
    """The file-mapped bytes of tensors `names`, neighbours within a page merged; tensors not on a file mapping
    (decompressed, in memory) are left out: they stay where they are."""
    found = []
    for n in names:
        data = source.tensors[n].data
        place = hugepages.file_place(data) if getattr(data, "nbytes", 0) else None
        if place is not None:
            found.append(Span(int(data.ctypes.data), int(data.nbytes), place[0], place[1], data))
    found.sort(key=lambda s: s.addr)
    out: list[Span] = []
    for s in found:
        last = out[-1] if out else None
        if last is not None and last.path == s.path and 0 <= s.addr - (last.addr + last.size) < PAGE:
            out[-1] = Span(last.addr, s.addr + s.size - last.addr, last.path, last.offset, (last.keep, s.keep))
        else:
            out.append(s)
    return out


class Streamer:
    """One streamed model's reader. `enter(g)` before the forward reads group g (a layer index or
    residency.HEAD), `leave(g)` after; one forward at a time (the model's own rule)."""

    def __init__(self, source: Any, budget_bytes: int):
        gs = groups(source)
        sizes = group_bytes(source)
        self.order = list(gs)  # group ids in forward order
        self._pos = {g: p for p, g in enumerate(self.order)}
        spans = [spans_of(source, gs[g]) for g in self.order]
        size = [sizes[g] for g in self.order]
        total = sum(size)
        ring = min(budget_bytes, sum(sorted(size)[-RING_GROUPS:]))  # room for any RING_GROUPS groups at once
        resident = [False] * len(size)
        if budget_bytes >= total:
            resident = [True] * len(size)
        else:
            room = budget_bytes - ring
            for p, n in enumerate(size):  # the first layers that fit beside the ring stay
                if n > room:
                    break
                resident[p], room = True, room - n
        self.resident_bytes = sum(n for n, r in zip(size, resident, strict=True) if r)
        self.streamed_bytes = total - self.resident_bytes  # what one token reads from the file
        self.ring_bytes = ring
        self.waited_s = 0.0  # the forward's time in enter() waiting for reads (written by the forward only)
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._ready: queue.SimpleQueue = queue.SimpleQueue()
        self._worker = _Worker(spans, size, resident, ring, self._inbox, self._ready)
        thread = threading.Thread(target=self._worker.run, name="modelc-stream", daemon=True)
        thread.start()
        weakref.finalize(self, self._inbox.put, None)  # the worker drops what it holds and ends

    @property
    def read_bytes(self) -> int:
        """Bytes read from the file so far (written by the worker)."""
        return self._worker.read_bytes

    def enter(self, group: int) -> None:
        p = self._pos.get(group)
        if p is None:
            return
        t0 = time.perf_counter()
        self._inbox.put(("want", p))
        while self._ready.get() != p:  # replies come in order; an older one was for a want since answered
            pass
        self.waited_s += time.perf_counter() - t0

    def leave(self, group: int) -> None:
        p = self._pos.get(group)
        if p is not None:
            self._inbox.put(("done", p))

    def close(self) -> None:
        self._inbox.put(None)


class _Worker:
    """Which groups are in memory and the reads: touched by the worker thread only. Drops go to a _Dropper's
    thread, so the reads never wait for them (freeing page cache costs ~10% of the time reading it takes)."""

    def __init__(self, spans, size, resident, ring, inbox, ready):
        self.spans, self.size, self.resident, self.ring = spans, size, resident, ring
        self.inbox, self.ready = inbox, ready
        self.loaded = [False] * len(size)  # resident groups read once
        self.ahead: collections.deque[int] = collections.deque()  # streamed groups read, not yet left
        self.held = 0  # bytes of self.ahead
        self.cursor = 0  # the next position to read ahead
        self.read_bytes = 0
        self.read_s = 0.0  # time in reads (a benchmark's breakdown)
        self.pending: int | None = None  # the want being answered
        self.dropper = _Dropper()

    def run(self) -> None:
        try:
            self._serve()
        except Exception:  # noqa: BLE001 - reading ahead only saves time: the forward faults its pages in itself
            if self.pending is not None:
                self.ready.put(self.pending)
            self._answer()
        finally:
            for p in list(self.ahead):
                self._drop(p)
            self.dropper.inbox.put(None)

    def _answer(self) -> None:
        """After a failure: answer every want at once, read nothing more."""
        while (msg := self.inbox.get()) is not None:
            if msg[0] == "want":
                self.ready.put(msg[1])

    def _serve(self) -> None:
        while True:
            nxt = self._next()
            try:
                msg = self.inbox.get(block=nxt is None)
            except queue.Empty:
                self._read(nxt)
                continue
            if msg is None:
                return
            kind, p = msg
            if kind == "want":
                self.pending = p
                self._want(p)
                self.ready.put(p)
                self.pending = None
            else:
                self._done(p)

    def _next(self) -> int | None:
        """The next group to read ahead, or None (the ring is full, or everything ahead is read)."""
        n = len(self.size)
        for k in range(n):
            p = (self.cursor + k) % n
            if self.resident[p]:
                if not self.loaded[p]:
                    return p
                continue
            if p in self.ahead:
                return None
            return p if not self.ahead or self.held + self.size[p] <= self.ring else None
        return None

    def _want(self, p: int) -> None:
        if self.resident[p]:
            if not self.loaded[p]:
                self._read(p)
            return
        if p not in self.ahead:  # not read ahead: the forward went elsewhere than expected
            while self.ahead:
                self._drop(self.ahead.popleft())
            self._read(p)
            return
        while self.ahead[0] != p:  # read ahead but skipped (a forward without the output projection)
            self._drop(self.ahead.popleft())

    def _done(self, p: int) -> None:
        if p in self.ahead:
            self.ahead.remove(p)
            self._drop(p)

    def _read(self, p: int) -> None:
        t0 = time.perf_counter()
        for s in self.spans[p]:
            lo = s.addr // PAGE * PAGE
            hi = -(-(s.addr + s.size) // PAGE) * PAGE
            if _LIBC is None or (_LIBC.madvise(lo, hi - lo, MADV_POPULATE_READ) != 0 and ctypes.get_errno() == EINVAL):
                _touch(s)  # before Linux 5.14 (no such advice): fault the pages in, one read per page
            self.read_bytes += s.size
        self.read_s += time.perf_counter() - t0
        self.cursor = (p + 1) % len(self.size)
        if self.resident[p]:
            self.loaded[p] = True
        else:
            self.ahead.append(p)
            self.held += self.size[p]

    def _drop(self, p: int) -> None:
        self.held -= self.size[p]
        self.dropper.inbox.put(self.spans[p])


class _Dropper:
    """Frees the page cache of the groups the forward has left, on its own thread (it owns the file descriptors)."""

    def __init__(self) -> None:
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.fds: dict[str, int] = {}
        self.drop_s = 0.0
        threading.Thread(target=self.run, name="modelc-stream-drop", daemon=True).start()

    def run(self) -> None:
        try:
            while (spans := self.inbox.get()) is not None:
                t0 = time.perf_counter()
                for s in spans:
                    self._drop(s)
                self.drop_s += time.perf_counter() - t0
        finally:
            for fd in self.fds.values():
                os.close(fd)

    def _drop(self, s: Span) -> None:
        lo = -(-s.addr // PAGE) * PAGE  # whole pages only: a neighbour's first or last page stays
        hi = (s.addr + s.size) // PAGE * PAGE
        if hi <= lo:
            return
        if _LIBC is not None:
            _LIBC.madvise(lo, hi - lo, MADV_DONTNEED)  # unmap from this process...
        fd = self._fd(s.path)
        if fd is not None:
            try:  # ...then free the page cache (unmapped clean pages go; mapped elsewhere stay)
                os.posix_fadvise(fd, s.offset + (lo - s.addr), hi - lo, os.POSIX_FADV_DONTNEED)
            except OSError:
                pass

    def _fd(self, path: str) -> int | None:
        fd = self.fds.get(path)
        if fd is None:
            try:
                fd = self.fds[path] = os.open(path, os.O_RDONLY)
            except OSError:
                return None
        return fd


def _touch(s: Span) -> None:
    """Fault in every page of s by reading one byte of each (ctypes reads: the GIL is released between)."""
    for a in range(s.addr // PAGE * PAGE, s.addr + s.size, PAGE):
        ctypes.c_uint8.from_address(max(a, s.addr)).value  # noqa: B018 - the read is the point
