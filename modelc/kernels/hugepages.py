"""Weights copied once at load into anonymous memory backed by 2 MiB pages (MADV_HUGEPAGE).

NOTE: decode reads every weight once per token, so it runs at the speed the CPU can stream
memory, and with 4 KiB pages of an mmap'd file each 4 KiB costs a TLB miss (two-level page
walks under a hypervisor). Measured on the 2-vCPU AMD EPYC VM, one thread streaming a 630 MB
GGUF: 13.7 GB/s from the file mapping (12.5 with MADV_HUGEPAGE on it: the page cache kept 4 KiB
mappings), 16.0 from a plain anonymous copy, 27.8 from an anonymous copy on huge pages. End to end,
two engines of one file in one process, decodes alternating (benchmarks/hugepages_ab.py; docs/benchmarks.md,
2026-12-02): TinyLlama decode 1.02-1.07x faster from the huge pages than from the repack cache's mapping.

So it is the default where the kernel hands out transparent huge pages for MADV_HUGEPAGE
(/sys/kernel/mm/transparent_hugepage/enabled: always or madvise) and the weights take MIN_BYTES or more
and at most half of MemAvailable (else the file mapping is kept, which can page). MODELC_HUGEPAGES=0 keeps the zero-copy
file mapping, =1 copies even without transparent huge pages.

RSS: the copy replaces the file pages a decode would have mapped anyway (the copy is read from
the file with pread, so no page of the file mapping is touched); the page cache still holds the
file, outside RSS. Costs: processes serving the same file no longer share its pages (each has its
own copy: set MODELC_HUGEPAGES=0 to run several on one host from one page cache), and loading takes
longer: the copy (0.5 s for 600 MB), and on a VM whose host backs guest memory lazily (Firecracker) each
2 MiB page is fresh memory to the host: +1.4-4.5 s for 600 MB there. No numba here.
"""

from __future__ import annotations

import mmap
import os

import numpy as np

HUGE_PAGE = 2 << 20
ALIGN = 64
MIN_BYTES = 64 << 20
"""Below this many bytes of weights the default keeps the file mapping: their 4 KiB pages are few enough for
the TLB, and the copy would still fault in fresh 2 MiB pages (tests load hundreds of tiny models)."""


def enabled(nbytes: int) -> bool:
    """Whether `nbytes` of weights go into a huge-page arena: not MODELC_HUGEPAGES=0, the OS has MADV_HUGEPAGE,
    unless MODELC_HUGEPAGES=1 the kernel has transparent huge pages for it and there are MIN_BYTES or more,
    and they take at most half of the memory available now (else the file mapping, which can page)."""
    flag = os.environ.get("MODELC_HUGEPAGES", "")
    if flag == "0" or not hasattr(mmap, "MADV_HUGEPAGE"):
        return False
    if flag != "1" and (nbytes < MIN_BYTES or not transparent_huge_pages()):
        return False
    return nbytes <= _available_bytes() // 2


THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"


def transparent_huge_pages(path: str = THP_ENABLED) -> bool:
    """Whether the kernel backs MADV_HUGEPAGE memory with 2 MiB pages ("always" or "madvise" selected in
    `path`, e.g. "always [madvise] never")."""
    try:
        with open(path) as f:
            mode = f.read()
    except OSError:
        return False
    return "[always]" in mode or "[madvise]" in mode


def _available_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Arena:
    """One anonymous mapping of `nbytes` (rounded up to 2 MiB, 2 MiB-aligned, MADV_HUGEPAGE) and a bump
    allocator: `copy(a)` returns a read-only copy of a 1-D uint8 array in it (64-byte aligned)."""

    def __init__(self, nbytes: int) -> None:
        size = max(HUGE_PAGE, -(-(nbytes + HUGE_PAGE) // HUGE_PAGE) * HUGE_PAGE)
        self._map = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._buf = np.frombuffer(self._map, np.uint8)  # keeps the mapping alive
        self._pos = (-self._buf.ctypes.data) % HUGE_PAGE
        self._map.madvise(mmap.MADV_HUGEPAGE, self._pos, size - self._pos)
        self.used_bytes = 0

    def copy(self, a: np.ndarray) -> np.ndarray:
        """A read-only copy of the 1-D uint8 array `a` in the arena. A view of a read-only file mapping is
        read from the file (pread: no page of the mapping is touched, so none counts in RSS); any other
        array is copied."""
        n = a.shape[0]
        pos = self._pos + (-self._pos) % ALIGN
        if pos + n > self._buf.shape[0]:
            raise MemoryError(f"huge-page arena full: {n} more bytes at {pos} of {self._buf.shape[0]}")
        out = self._buf[pos : pos + n]
        if not _read_from_file(out, a):
            out[:] = a
        out.flags.writeable = False
        self._pos = pos + n
        self.used_bytes += n
        return out


def read_copy(a: np.ndarray) -> np.ndarray:
    """A private copy of the 1-D uint8 array `a`, read from its file with pread when `a` views a read-only
    file mapping (so no page of the mapping is touched and none counts in RSS), else copied."""
    out = np.empty(a.shape[0], np.uint8)
    if not _read_from_file(out, a):
        out[:] = a
    return out


FILE_ID = "modelc_file_id"
"""The attribute `mark_file` sets on an np.memmap: (st_dev, st_ino) of the file it maps."""


def mark_file(mm: np.memmap, fd: int) -> None:
    """Record on `mm` the identity of the file it maps, from the open descriptor it was made from: the file
    is then read with pread only while its path still names that file (the repack cache renames a new
    file over an old one, with its arrays at other offsets, and prunes old ones)."""
    st = os.fstat(fd)
    setattr(mm, FILE_ID, (st.st_dev, st.st_ino))


def _mapping(a: np.ndarray) -> np.memmap | None:
    """The np.memmap that owns the mapping `a` views (views of a memmap are memmaps too, with its offset)."""
    m = a
    while m is not None and not (isinstance(m, np.memmap) and isinstance(m.base, mmap.mmap)):
        m = getattr(m, "base", None)
    return m


def file_place(a: np.ndarray) -> tuple[str, int] | None:
    """(file name, byte offset of a's first byte in it) when `a` views a file mapping that nothing writes:
    an np.memmap of mode "r", or of mode "c" (copy-on-write: the repack cache's, whose arrays are only
    read), else None."""
    m = _mapping(a)
    if m is None or getattr(m, "mode", "") not in ("r", "c") or not getattr(m, "filename", None):
        return None
    return str(m.filename), int(m.offset + (a.ctypes.data - m.ctypes.data))


def _read_from_file(out: np.ndarray, a: np.ndarray) -> bool:
    """out[:] = a by pread from the file `a` maps (file_place); False when `a` is not such a view, or its
    file is gone or is no longer the one `mark_file` recorded (the caller then copies through the mapping)."""
    place = file_place(a)
    if place is None:
        return False
    filename, start = place
    try:
        fd = os.open(filename, os.O_RDONLY)
    except OSError:
        return False
    try:
        want = getattr(_mapping(a), FILE_ID, None)
        st = os.fstat(fd)
        if want is not None and (st.st_dev, st.st_ino) != want:
            return False
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
