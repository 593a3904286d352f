"""Weights moved onto 2 MiB pages in place, in the background, after load (MADV_HUGEPAGE + mremap).

NOTE: decode reads every weight once per token, so it runs at the speed the CPU can stream
memory, and with 4 KiB pages of an mmap'd file each 4 KiB costs a TLB miss (two-level page
walks under a hypervisor). Measured on the 2-vCPU AMD EPYC VM, one thread streaming a 630 MB
GGUF: 13.7 GB/s from the file mapping (12.5 with MADV_HUGEPAGE on it: the page cache kept 4 KiB
mappings), 16.0 from a plain anonymous copy, 27.8 from an anonymous copy on huge pages. End to end,
two engines of one file in one process, decodes alternating (benchmarks/hugepages_ab.py; docs/benchmarks.md,
2026-12-02): TinyLlama decode 1.02-1.07x faster from huge pages than from the repack cache's mapping.

How: the weights are served from their file mappings (the model file's, the repack cache's) as soon as they
are loaded. `promote(a)` queues the 2 MiB-aligned stretches under a file-mapped array; a daemon thread
copies each stretch (up to STEP bytes) into fresh anonymous memory advised MADV_HUGEPAGE, then mremap()s
it over the same addresses. Every array keeps its address, nothing is swapped under the engine, and a
kernel reading a stretch while it moves sees the same bytes before and after (the page tables change
under the mm lock; a read in between faults and waits). A copy made at load instead (the arena of an
earlier session) made loading wait for the huge pages: on a VM whose host backs guest memory lazily
(Firecracker) each fresh 2 MiB page is a host fault of up to 17 ms, +1.4-4.5 s for 600 MB; here that
time passes while the server already serves (the first seconds of decode run slower while it does).

The default: on where the kernel hands out transparent huge pages for MADV_HUGEPAGE
(/sys/kernel/mm/transparent_hugepage/enabled: always or madvise) and the weights take MIN_BYTES or more
and at most half of the memory the process may still fill (modelc.memory.available_bytes: MemAvailable, and under
a memory cgroup's limit the group's headroom: the moved copies are anonymous memory charged to the group, which
its page cache of the same file was not). MODELC_HUGEPAGES=0 keeps the file mappings, =1 moves any size.

RSS: the moved pages take the place of the file pages a decode maps anyway; the page cache still holds the
file, outside RSS. Processes serving one file no longer share those pages (set MODELC_HUGEPAGES=0 to run
several on one host from one page cache). Arrays that are not file mappings (a first load's fresh repacks)
are left as they are: numpy already advises MADV_HUGEPAGE on its allocations of 4 MiB and more.
Linux only (mremap); elsewhere `promote` does nothing. No numba here.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import mmap
import os
import sys
import threading
import time
import weakref

import numpy as np

from modelc import memory

HUGE_PAGE = 2 << 20
STEP = 32 << 20
"""At most this many bytes move in one mremap: one mapping each, so a 70 GB model takes ~2200 of the
process's 65530 (vm.max_map_count)."""
SETTLE_S = 0.5
"""The mover waits this long after the first array of a batch is queued, so a load's neighbouring arrays merge
into longer stretches (a 2 MiB page straddling two arrays moves only once both are queued)."""
MIN_BYTES = 64 << 20
"""Below this many bytes of weights the default keeps the file mappings: their 4 KiB pages are few enough for
the TLB (and tests load hundreds of tiny models)."""


def enabled(nbytes: int) -> bool:
    """Whether `nbytes` of weights move onto huge pages: not MODELC_HUGEPAGES=0, the mover can run here (Linux),
    unless MODELC_HUGEPAGES=1 the kernel has transparent huge pages for it and there are MIN_BYTES or more,
    and they take at most half of the memory the process may still fill now (`_available_bytes`; else the file
    mapping, which can page)."""
    flag = os.environ.get("MODELC_HUGEPAGES", "")
    if flag == "0" or _LIBC is None:
        return False
    if flag != "1" and (nbytes < MIN_BYTES or not transparent_huge_pages()):
        return False
    return nbytes <= _available_bytes() // 2


THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"
THP_PMD_SIZE = "/sys/kernel/mm/transparent_hugepage/hpage_pmd_size"


def transparent_huge_pages(path: str = THP_ENABLED, pmd_size_path: str = THP_PMD_SIZE) -> bool:
    """Whether the kernel backs MADV_HUGEPAGE memory with 2 MiB pages ("always" or "madvise" selected in
    `path`, e.g. "always [madvise] never", and HUGE_PAGE in `pmd_size_path`). An arm64 kernel built for 16 KiB
    or 64 KiB pages has 32 MiB or 512 MiB huge pages: the 2 MiB stretches moved here would stay on small
    pages there, a copy for nothing. A kernel that does not say (before Linux 4.13) is taken as 2 MiB."""
    try:
        with open(path) as f:
            mode = f.read()
    except OSError:
        return False
    if "[always]" not in mode and "[madvise]" not in mode:
        return False
    try:
        with open(pmd_size_path) as f:
            return int(f.read()) == HUGE_PAGE
    except (OSError, ValueError):
        return True


MEMINFO = "/proc/meminfo"
PROC = "/proc/self"


def _available_bytes() -> int:
    """What this process may still fill: min(MemAvailable, its memory cgroup's headroom); 0 where unknown. A copy
    is anonymous memory, charged to the group, where the file pages it replaces were reclaimable page cache: under
    a limit (a container, a systemd unit) MemAvailable alone would let the copies outgrow the group's room."""
    return memory.available_bytes(MEMINFO, PROC) or 0


def read_copy(a: np.ndarray) -> np.ndarray:
    """A private copy of the 1-D uint8 array `a`, read from its file with pread when `a` views a read-only
    file mapping (so no page of the mapping is touched and none counts in RSS), else copied."""
    out = np.empty(a.shape[0], np.uint8)
    if not _read_from_file(out, a):
        out[:] = a
    return out


def _mapping(a: np.ndarray) -> np.memmap | None:
    """The np.memmap that owns the mapping `a` views (views of a memmap are memmaps too, with its offset)."""
    m = a
    while m is not None and not (isinstance(m, np.memmap) and isinstance(m.base, mmap.mmap)):
        m = getattr(m, "base", None)
    return m


def _unwritten_mapping(a: np.ndarray) -> np.memmap | None:
    """The np.memmap `a` views when nothing writes it through to its file: mode "r", or mode "c" (copy-on-write:
    the repack cache's, whose arrays are only read); else None (r+ / w+: writes must reach the file)."""
    m = _mapping(a)
    return m if m is not None and getattr(m, "mode", "") in ("r", "c") else None


def file_place(a: np.ndarray) -> tuple[str, int] | None:
    """(file name, byte offset of a's first byte in it) when `a` views a file mapping that nothing writes
    (`_unwritten_mapping`), else None."""
    m = _unwritten_mapping(a)
    if m is None or not getattr(m, "filename", None):
        return None
    return str(m.filename), int(m.offset + (a.ctypes.data - m.ctypes.data))


def _read_from_file(out: np.ndarray, a: np.ndarray) -> bool:
    """out[:] = a by pread from the file `a` maps (file_place); False when `a` is not such a view, or its
    file is gone (the caller then copies through the mapping)."""
    place = file_place(a)
    if place is None:
        return False
    filename, start = place
    try:
        fd = os.open(filename, os.O_RDONLY)
    except OSError:
        return False
    try:
        view = memoryview(out)
        done = 0
        while done < out.shape[0]:
            got = os.preadv(fd, [view[done:]], start + done)
            if got <= 0:
                return False
            done += got
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


# ---- the mover ---------------------------------------------------------------------------------------

MREMAP_MAYMOVE, MREMAP_FIXED = 1, 2
_log = logging.getLogger("modelc.hugepages")
"""A failed move is one warning here (stdlib logging: with no handler set up, Python prints it to stderr)."""
_MAP_FAILED = ctypes.c_void_p(-1).value


def _load_libc():
    """libc with mmap, munmap, madvise, mprotect and mremap typed, or None (not Linux, no MADV_HUGEPAGE)."""
    if not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_HUGEPAGE"):
        return None
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        vp, sz, i = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
        lib.mmap.argtypes, lib.mmap.restype = [vp, sz, i, i, i, ctypes.c_long], vp
        lib.munmap.argtypes, lib.munmap.restype = [vp, sz], i
        lib.madvise.argtypes, lib.madvise.restype = [vp, sz, i], i
        lib.mprotect.argtypes, lib.mprotect.restype = [vp, sz, i], i
        lib.mremap.argtypes, lib.mremap.restype = [vp, sz, sz, i, vp], vp
    except (OSError, AttributeError):
        return None
    return lib


_LIBC = _load_libc()


def _move(addr: int, n: int, prot: int) -> str | None:
    """Copy the n bytes at addr (2 MiB-aligned, n a multiple of 2 MiB) into fresh anonymous memory advised
    MADV_HUGEPAGE and mremap it over addr with protection prot; None when moved, else the failed call and its
    errno (addr untouched)."""
    lib = _LIBC
    p = lib.mmap(None, n + HUGE_PAGE, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    if p is None or p == _MAP_FAILED:
        return _failed("mmap")
    a = p + (-p) % HUGE_PAGE
    moved = False
    try:
        lib.madvise(a, n, mmap.MADV_HUGEPAGE)  # advice: without it the copy still lands, on small pages
        ctypes.memmove(a, addr, n)  # through the mapping: the bytes every reader of it sees
        if prot != mmap.PROT_READ | mmap.PROT_WRITE and lib.mprotect(a, n, prot) != 0:
            return _failed("mprotect")
        moved = lib.mremap(a, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, addr) == addr
        return None if moved else _failed("mremap")
    finally:
        if a > p:
            lib.munmap(p, a - p)
        lib.munmap(a + n, p + HUGE_PAGE - a)  # the tail: a - p < HUGE_PAGE
        if not moved:
            lib.munmap(a, n)


def _failed(call: str) -> str:
    e = ctypes.get_errno()
    return f"{call}: {errno.errorcode.get(e, str(e))} ({os.strerror(e)})"


def _stretches(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The 2 MiB-aligned (start, end) inside the union of the byte ranges."""
    out = []
    lo = hi = None
    for s, e in sorted(ranges) + [(None, None)]:
        if s is not None and hi is not None and s <= hi:
            hi = max(hi, e)
            continue
        if lo is not None:
            a, b = lo + (-lo) % HUGE_PAGE, hi - hi % HUGE_PAGE
            if b > a:
                out.append((a, b))
        lo, hi = s, e
    return out


class _Mover:
    """The daemon thread that moves queued stretches of file mappings onto huge pages, mapping by mapping."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._maps: dict[int, dict] = {}  # id(np.memmap) -> {"ref", "ranges", "done", "prot", "new"}
        self._thread: threading.Thread | None = None
        self._idle = threading.Event()
        self._idle.set()
        self.moved_bytes = 0
        self.failed = 0

    def add(self, owner: np.memmap, start: int, end: int) -> None:
        prot = mmap.PROT_READ if owner.mode == "r" else mmap.PROT_READ | mmap.PROT_WRITE  # as the mapping had
        with self._lock:
            st = self._maps.get(id(owner))
            if st is None or st["ref"]() is not owner:
                st = {"ref": weakref.ref(owner), "ranges": [], "done": set(), "prot": prot, "new": False}
                self._maps[id(owner)] = st
                weakref.finalize(owner, self._forget, id(owner), st)
            st["ranges"].append((start, end))
            st["new"] = True
            self._idle.clear()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="modelc-hugepages", daemon=True)
                self._thread.start()

    def _forget(self, key: int, st: dict) -> None:
        with self._lock:
            if self._maps.get(key) is st:
                del self._maps[key]

    def _run(self) -> None:
        while True:
            time.sleep(SETTLE_S)
            with self._lock:
                pairs = [(st["ref"](), st) for st in self._maps.values() if st["new"]]
                held = [o for o, _ in pairs if o is not None]  # strong refs: no unmap while moving
                todo = [st for o, st in pairs if o is not None]
                for st in todo:
                    st["new"] = False
                if not todo:
                    self._thread = None
                    self._idle.set()
                    return
            for st in todo:
                with self._lock:
                    ranges = list(st["ranges"])
                err = self._move_all(_stretches(ranges), st)
                if err is not None:
                    self.failed += 1
                    _log.warning(
                        "huge pages: a weight mapping stays partly on 4 KiB pages, %s (%d MiB moved in this"
                        " process; an ENOMEM from mremap can be vm.max_map_count; MODELC_HUGEPAGES=0 skips the move)",
                        err,
                        self.moved_bytes >> 20,
                    )
            del pairs, held  # before the next sleep: an unloaded model's mapping can go

    def _move_all(self, stretches: list[tuple[int, int]], st: dict) -> str | None:
        """Move the pages of the stretches not moved yet, in runs of up to STEP bytes; at the first failure,
        what failed (`_move`; the rest stays on its mapping), else None."""
        done = st["done"]  # 2 MiB page addresses moved already
        for a, b in stretches:
            c = a
            while c < b:
                if c in done:
                    c += HUGE_PAGE
                    continue
                e = c
                while e < b and e - c < STEP and e not in done:
                    e += HUGE_PAGE
                err = _move(c, e - c, st["prot"])
                if err is not None:
                    return err
                done.update(range(c, e, HUGE_PAGE))
                self.moved_bytes += e - c
                c = e
        return None

    def wait(self, timeout: float | None = None) -> bool:
        return self._idle.wait(timeout)


_MOVER = _Mover()
if hasattr(os, "register_at_fork"):  # a forked child has no mover thread (and maybe a held lock): start afresh
    os.register_at_fork(after_in_child=lambda: _MOVER.__init__())


def promote(a: np.ndarray) -> None:
    """Queue the whole 2 MiB pages under `a` for the move onto huge pages, where `a` views a file mapping
    (np.memmap) and this OS can (Linux); anything else stays as it is."""
    if _LIBC is None or a.size == 0:
        return
    owner = _unwritten_mapping(a)
    if owner is None:
        return
    _MOVER.add(owner, a.ctypes.data, a.ctypes.data + a.nbytes)


def wait(timeout: float | None = None) -> bool:
    """Wait until everything queued has moved (or failed to); False when `timeout` passed first."""
    return _MOVER.wait(timeout)


def moving() -> bool:
    """Whether queued pages are still moving (or waiting to)."""
    return not _MOVER._idle.is_set()


def move_failures() -> int:
    """Mappings whose move stopped at a failed call in this process (their rest stays on the file mapping)."""
    return _MOVER.failed


def moved_bytes() -> int:
    """Bytes moved onto huge pages in this process so far."""
    return _MOVER.moved_bytes
