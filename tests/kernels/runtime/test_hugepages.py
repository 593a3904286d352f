"""kernels/runtime/hugepages.py: file-mapped weights moved onto huge pages in place, in the background, and WeightReader's
use of it."""

from __future__ import annotations

import mmap
import threading

import numpy as np
import pytest

from modelc.kernels.runtime import hugepages
from modelc.kernels.select import kernel_set

HP = hugepages.HUGE_PAGE
linux_only = pytest.mark.skipif(hugepages._LIBC is None, reason="moving pages needs Linux's mremap")


def test_stretches_are_the_whole_huge_pages_inside_the_union_of_the_ranges() -> None:
    assert hugepages._stretches([]) == []
    assert hugepages._stretches([(1, 2 * HP - 1)]) == []  # no whole page inside
    assert hugepages._stretches([(HP + 5, 3 * HP), (10, HP + 5)]) == [(HP, 3 * HP)]  # touching ranges merge
    got = hugepages._stretches([(0, HP), (HP // 2, 2 * HP + 7), (5 * HP - 1, 8 * HP + 1)])
    assert got == [(0, 2 * HP), (5 * HP, 8 * HP)]


def _maps(start: int, end: int) -> list[tuple[str, int]]:
    """(permissions, inode) of each mapping of /proc/self/maps that overlaps [start, end)."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo < end and hi > start:
                out.append((parts[1], int(parts[4])))
    return out


@linux_only
@pytest.mark.parametrize("mode", ["r", "c"])
def test_a_file_mapping_moves_onto_anonymous_pages_in_place_while_read(tmp_path, mode) -> None:
    p = tmp_path / "w.bin"
    data = np.random.default_rng(1).integers(0, 256, 9 * HP + 12345, dtype=np.uint8)
    data.tofile(p)
    mm = np.memmap(p, np.uint8, mode=mode)
    addr = mm.ctypes.data
    parts = [mm[100 : 3 * HP + 1], mm[3 * HP + 1 :]]  # two arrays: the page they share moves too
    stop, seen = threading.Event(), []

    def read() -> None:  # a reader of the mapping all the while (a decode in its worker thread)
        while not stop.is_set():
            seen.append(np.array_equal(mm[::4099], data[::4099]))

    t = threading.Thread(target=read)
    t.start()
    before, failures = hugepages.moved_bytes(), hugepages.move_failures()
    try:
        for a in parts:
            hugepages.promote(a)
        assert hugepages.wait(60)
    finally:
        stop.set()
        t.join()
    lo = addr + 100 + (-(addr + 100)) % HP
    hi = (addr + mm.size) // HP * HP
    assert hugepages.moved_bytes() - before == hi - lo and hi - lo >= 8 * HP
    assert hugepages.move_failures() == failures and not hugepages.moving()
    assert seen and all(seen)
    assert mm.ctypes.data == addr and np.array_equal(mm, data)  # same addresses, same bytes
    perms = "r--p" if mode == "r" else "rw-p"
    assert _maps(lo, hi) and all(m == (perms, 0) for m in _maps(lo, hi))  # anonymous now, as protected as before
    assert all(inode != 0 for _, inode in _maps(addr, lo) + _maps(hi, addr + mm.size))  # partial pages stay
    if mode == "c":
        mm[lo - addr] = data[lo - addr] ^ 1  # copy-on-write mappings stay writable (nothing writes weights)
        assert mm[lo - addr] != data[lo - addr]


@linux_only
def test_writable_shared_mappings_and_heap_arrays_stay_where_they_are(tmp_path) -> None:
    p = tmp_path / "w.bin"
    np.zeros(4 * HP, np.uint8).tofile(p)
    rw = np.memmap(p, np.uint8, mode="r+")  # its writes must reach the file
    before = hugepages.moved_bytes()
    hugepages.promote(rw)
    hugepages.promote(np.zeros(4 * HP, np.uint8))
    assert hugepages.wait(10)
    assert hugepages.moved_bytes() == before
    assert all(inode != 0 for _, inode in _maps(rw.ctypes.data, rw.ctypes.data + rw.size))


def test_file_mapped_source_is_read_from_the_file(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """read_copy of a view of a read-only np.memmap reads the file with pread (at the view's offset), so the
    mapping's pages are not touched (repacking reads its input this way)."""
    p = tmp_path / "w.bin"
    data = np.random.default_rng(1).integers(0, 256, 5 * mmap.PAGESIZE + 123, dtype=np.uint8)
    data.tofile(p)
    mm = np.memmap(p, dtype=np.uint8, mode="r", offset=5)
    calls = []
    real = hugepages.os.preadv
    monkeypatch.setattr(hugepages.os, "preadv", lambda *x: calls.append(1) or real(*x))
    np.testing.assert_array_equal(hugepages.read_copy(mm[7:]), data[12:])
    assert calls
    assert hugepages._read_from_file(np.empty(3, np.uint8), mm[2:5])
    assert not hugepages._read_from_file(np.empty(3, np.uint8), data[:3])
    np.testing.assert_array_equal(hugepages.read_copy(data[:7]), data[:7])


@linux_only
def test_default_where_the_kernel_has_huge_pages_and_memory_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MODELC_HUGEPAGES", raising=False)
    monkeypatch.setattr(hugepages, "transparent_huge_pages", lambda: True)
    monkeypatch.setattr(hugepages, "_available_bytes", lambda: 1 << 40)
    assert hugepages.enabled(hugepages.MIN_BYTES)  # on by default
    assert not hugepages.enabled(hugepages.MIN_BYTES - 1)  # a tiny model keeps its mapping
    assert not hugepages.enabled(1 << 40)  # more than half of the memory available
    monkeypatch.setattr(hugepages, "transparent_huge_pages", lambda: False)
    assert not hugepages.enabled(hugepages.MIN_BYTES)  # "never": 4 KiB pages stream no faster than the mapping
    monkeypatch.setenv("MODELC_HUGEPAGES", "1")
    assert hugepages.enabled(1)
    monkeypatch.setenv("MODELC_HUGEPAGES", "0")
    monkeypatch.setattr(hugepages, "transparent_huge_pages", lambda: True)
    assert not hugepages.enabled(1)


@linux_only
def test_the_memory_guard_counts_a_cgroup_limit_not_only_memavailable(tmp_path, monkeypatch) -> None:
    """The moved copies are anonymous memory charged to the process's cgroup: under a 1 GiB limit with 600 MiB
    charged (200 MiB of it page cache) there is 624 MiB of room, whatever MemAvailable says (20 GB here)."""
    from tests.test_memory import _files, _proc

    root = tmp_path / "unified"
    _files(root, {"svc/memory.max": str(1 << 30), "svc/memory.current": str(600 << 20),
                  "svc/memory.stat": f"anon {400 << 20}\nfile {200 << 20}\n"})  # fmt: skip
    proc = _proc(tmp_path, "0::/svc\n", [("/", str(root), "cgroup2", "rw")])
    monkeypatch.setattr(hugepages, "PROC", proc)
    monkeypatch.setattr(hugepages, "MEMINFO", str(tmp_path / "proc" / "meminfo"))
    monkeypatch.delenv("MODELC_HUGEPAGES", raising=False)
    monkeypatch.setattr(hugepages, "transparent_huge_pages", lambda: True)
    assert hugepages._available_bytes() == (1 << 30) - (400 << 20)
    assert hugepages.enabled(300 << 20)  # at most half of the group's room
    assert not hugepages.enabled(400 << 20)  # MemAvailable alone (20 GB) would have moved it
    (root / "svc" / "memory.max").write_text("max\n")  # no limit: MemAvailable decides
    assert hugepages.enabled(400 << 20)
    (tmp_path / "proc" / "meminfo").write_text("MemTotal: 1 kB\n")  # nothing known: no move
    assert not hugepages.enabled(hugepages.MIN_BYTES)


def test_transparent_huge_pages_reads_the_selected_mode_and_the_page_size(tmp_path) -> None:
    mode, size, missing = tmp_path / "enabled", tmp_path / "hpage_pmd_size", str(tmp_path / "missing")
    size.write_text("2097152\n")
    for text, want in (("always [madvise] never\n", True), ("[always] madvise never\n", True),
                       ("always madvise [never]\n", False)):  # fmt: skip
        mode.write_text(text)
        assert hugepages.transparent_huge_pages(str(mode), str(size)) is want
    assert hugepages.transparent_huge_pages(missing, str(size)) is False
    assert hugepages.transparent_huge_pages(str(mode), missing) is False  # "never" still
    mode.write_text("always [madvise] never\n")
    assert hugepages.transparent_huge_pages(str(mode), missing) is True  # an old kernel: 2 MiB
    for pmd in (32 << 20, 512 << 20):  # arm64 with 16 KiB / 64 KiB pages
        size.write_text(f"{pmd}\n")
        assert hugepages.transparent_huge_pages(str(mode), str(size)) is False


def test_weight_reader_queues_its_matrices(monkeypatch: pytest.MonkeyPatch) -> None:
    from modelc.models.tiny import make_tiny_llama
    from modelc.models.weights import WeightReader

    queued = []
    monkeypatch.setattr(hugepages, "promote", queued.append)
    monkeypatch.setenv("MODELC_HUGEPAGES", "1")
    monkeypatch.setenv("MODELC_REPACK", "0")
    model = make_tiny_llama()
    name = "model.layers.0.self_attn.q_proj.weight"
    t = model.tensors[name]
    r = WeightReader(model, kernel_set("numba"))
    assert r.huge
    w = r.matrix(name, *t.shape)
    assert np.shares_memory(w.blocks, t.data)  # served where it is; the move (if any) happens in place
    assert len(queued) == 1 and np.shares_memory(queued[0], t.data)
    monkeypatch.setenv("MODELC_HUGEPAGES", "0")
    assert not WeightReader(model, kernel_set("numba")).huge
    monkeypatch.setenv("MODELC_HUGEPAGES", "1")
    assert not WeightReader(model, kernel_set("ref")).huge


@linux_only
def test_a_failed_move_leaves_the_rest_on_the_mapping_is_counted_and_logged(tmp_path, monkeypatch, caplog) -> None:
    p = tmp_path / "w.bin"
    np.ones(6 * HP, np.uint8).tofile(p)
    mm = np.memmap(p, np.uint8, mode="r")
    calls = []
    monkeypatch.setattr(
        hugepages, "_move", lambda addr, n, prot: calls.append(n) or "mremap: ENOMEM (Cannot allocate memory)"
    )
    before, failures = hugepages.moved_bytes(), hugepages.move_failures()
    with caplog.at_level("WARNING", logger="modelc.hugepages"):
        hugepages.promote(mm)
        assert hugepages.wait(10)
    assert len(calls) == 1  # stops at the first failure
    assert hugepages.moved_bytes() == before and hugepages.move_failures() == failures + 1
    assert np.array_equal(mm, np.ones(6 * HP, np.uint8))
    assert [r.getMessage() for r in caplog.records if "mremap: ENOMEM" in r.getMessage()]


@linux_only
def test_a_real_failed_call_names_itself_and_leaves_the_bytes(tmp_path) -> None:
    p = tmp_path / "w.bin"
    np.arange(2 * HP, dtype=np.uint32).astype(np.uint8).tofile(p)
    mm = np.memmap(p, np.uint8, mode="r")
    addr = mm.ctypes.data + (-mm.ctypes.data) % HP
    n = (mm.ctypes.data + mm.nbytes - addr) // HP * HP
    if n == 0:
        pytest.skip("the mapping holds no whole huge page")
    err = hugepages._move(addr, n, 0xFFFF)  # an invalid protection: mprotect fails with EINVAL
    assert err is not None and err.startswith("mprotect: EINVAL")
    assert np.array_equal(mm, np.arange(2 * HP, dtype=np.uint32).astype(np.uint8))


@linux_only
def test_a_forked_child_starts_with_an_idle_mover(tmp_path) -> None:
    import os
    import signal
    import time

    p = tmp_path / "w.bin"
    np.ones(6 * HP, np.uint8).tofile(p)
    mm = np.memmap(p, np.uint8, mode="r")
    hugepages.promote(mm)  # the parent's mover is busy (or about to be) when the child forks
    pid = os.fork()
    if pid == 0:  # the child: waiting returns at once, and a move there works
        ok = hugepages.wait(5) and not hugepages.moving() and hugepages.moved_bytes() == 0
        hugepages.promote(mm)
        ok = ok and hugepages.wait(30) and hugepages.moved_bytes() > 0 and bool(np.all(mm == 1))
        os._exit(0 if ok else 1)
    deadline = time.monotonic() + 60
    done, status = os.waitpid(pid, os.WNOHANG)
    while not done and time.monotonic() < deadline:
        time.sleep(0.05)
        done, status = os.waitpid(pid, os.WNOHANG)
    if not done:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert done, "the forked child hung"
    assert hugepages.wait(30)
    assert os.waitstatus_to_exitcode(status) == 0
