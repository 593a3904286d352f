"""Weights copied once at load into anonymous memory backed by 2 MiB pages (MADV_HUGEPAGE).

NOTE: decode reads every weight once per token, so it runs at the speed the CPU can stream
memory, and with 4 KiB pages of an mmap'd file each 4 KiB costs a TLB miss (two-level page
walks under a hypervisor). Measured on the 2-vCPU AMD EPYC VM, one thread streaming a 630 MB
GGUF: 13.7 GB/s from the file mapping (12.5 with MADV_HUGEPAGE on it: the page cache kept 4 KiB
mappings), 16.0 from a plain anonymous copy, 27.8 from an anonymous copy on huge pages.

RSS: the copy replaces the file pages a decode would have mapped anyway (the copy is read from
the file with pread, so no page of the file mapping is touched); the page cache still holds the
file, outside RSS. Costs: processes serving the same
file no longer share its pages (each has its own copy), the weights must fit in RAM (at most half of
MemAvailable, else the file mapping is kept), and loading takes longer (the copy, and the kernel
compacting memory for the huge pages: +5-9 s for 630 MB on the busy VM). So it is opt-in:
`MODELC_HUGEPAGES=1`; the default keeps the zero-copy file mapping. No numba here.
"""

from __future__ import annotations

import mmap
import os

import numpy as np

HUGE_PAGE = 2 << 20
ALIGN = 64


def enabled(nbytes: int) -> bool:
    """Whether `nbytes` of weights go into a huge-page arena: MODELC_HUGEPAGES=1, the OS has MADV_HUGEPAGE,
    and they take at most half of the memory available now (else the file mapping, which can page)."""
    if os.environ.get("MODELC_HUGEPAGES", "0") != "1" or not hasattr(mmap, "MADV_HUGEPAGE"):
        return False
    return nbytes <= _available_bytes() // 2


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


def file_place(a: np.ndarray) -> tuple[str, int] | None:
    """(file name, byte offset of a's first byte in it) when `a` views a read-only file mapping (np.memmap,
    mode "r"), else None."""
    m = a  # the memmap that owns the mapping (views of a memmap are memmaps too, with its offset)
    while m is not None and not (isinstance(m, np.memmap) and isinstance(m.base, mmap.mmap)):
        m = getattr(m, "base", None)
    if m is None or getattr(m, "mode", "") != "r" or not getattr(m, "filename", None):
        return None
    return str(m.filename), int(m.offset + (a.ctypes.data - m.ctypes.data))


def _read_from_file(out: np.ndarray, a: np.ndarray) -> bool:
    """out[:] = a by pread from the file `a` maps (np.memmap, mode "r"); False when `a` is not such a view."""
    place = file_place(a)
    if place is None:
        return False
    filename, start = place
    fd = os.open(filename, os.O_RDONLY)
    try:
        view = memoryview(out)
        done = 0
        while done < out.shape[0]:
            got = os.preadv(fd, [view[done:]], start + done)
            if got <= 0:
                return False
            done += got
    finally:
        os.close(fd)
    return True
