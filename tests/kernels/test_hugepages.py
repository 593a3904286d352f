"""kernels/hugepages.py: the huge-page arena the weights are copied into at load, and WeightReader's use of it."""

from __future__ import annotations

import mmap

import numpy as np
import pytest

from modelc.kernels import hugepages
from modelc.kernels.select import kernel_set

pytestmark = pytest.mark.skipif(not hasattr(mmap, "MADV_HUGEPAGE"), reason="no MADV_HUGEPAGE on this OS")


def test_copies_are_equal_aligned_and_read_only() -> None:
    arena = hugepages.Arena(10_000)
    rng = np.random.default_rng(0)
    srcs = [rng.integers(0, 256, n, dtype=np.uint8) for n in (1, 1000, 3333, 64)]
    outs = [arena.copy(s) for s in srcs]
    for s, o in zip(srcs, outs, strict=True):
        np.testing.assert_array_equal(o, s)
        assert o.ctypes.data % hugepages.ALIGN == 0
        assert not o.flags.writeable
        assert not np.shares_memory(o, s)
    assert arena.used_bytes == sum(s.size for s in srcs)
    assert (outs[0].ctypes.data - (outs[0].ctypes.data % hugepages.HUGE_PAGE)) % hugepages.HUGE_PAGE == 0


def test_full_arena_raises() -> None:
    arena = hugepages.Arena(1)
    arena.copy(np.zeros(hugepages.HUGE_PAGE, np.uint8))
    with pytest.raises(MemoryError):
        arena.copy(np.zeros(4 * hugepages.HUGE_PAGE, np.uint8))


def test_file_mapped_source_is_read_from_the_file(tmp_path) -> None:
    """A view of a read-only np.memmap is read with pread (at the view's offset in the file)."""
    p = tmp_path / "w.bin"
    data = np.random.default_rng(1).integers(0, 256, 5 * mmap.PAGESIZE + 123, dtype=np.uint8)
    data.tofile(p)
    mm = np.memmap(p, dtype=np.uint8, mode="r", offset=5)
    out = hugepages.Arena(mm.size).copy(mm[7:].reshape(-1, 1).reshape(-1))
    np.testing.assert_array_equal(out, data[12:])
    assert hugepages._read_from_file(np.empty(3, np.uint8), mm[2:5])
    assert not hugepages._read_from_file(np.empty(3, np.uint8), data[:3])


def test_default_where_the_kernel_has_huge_pages_and_memory_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        pytest.skip("no MADV_HUGEPAGE on this OS")
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


def test_transparent_huge_pages_reads_the_selected_mode(tmp_path) -> None:
    mode = tmp_path / "enabled"
    for text, want in (("always [madvise] never\n", True), ("[always] madvise never\n", True),
                       ("always madvise [never]\n", False)):  # fmt: skip
        mode.write_text(text)
        assert hugepages.transparent_huge_pages(str(mode)) is want
    assert hugepages.transparent_huge_pages(str(tmp_path / "missing")) is False


def test_repack_cache_arrays_are_read_from_their_file(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The repack cache maps its file copy-on-write; the arena reads its arrays with pread, so the mapping's
    pages never count in RSS beside the copy."""
    from modelc.models import r16_cache

    a = np.random.default_rng(2).integers(0, 256, (3, 5000), dtype=np.uint8)
    path = tmp_path / "x.r16"
    assert r16_cache._write(path, {"w": a})
    got = r16_cache._read(path)["w"]
    np.testing.assert_array_equal(got, a)
    place = hugepages.file_place(got[1:])
    assert place is not None and place[0] == str(path)
    calls = []
    real = hugepages.os.preadv
    monkeypatch.setattr(hugepages.os, "preadv", lambda *x: calls.append(1) or real(*x))
    out = hugepages.Arena(a.nbytes).copy(got.reshape(-1))
    np.testing.assert_array_equal(out, a.reshape(-1))
    assert calls
    # another process renames a new cache file over it (its arrays elsewhere), then prunes it: the copy
    # still holds what this process mapped
    assert r16_cache._write(path, {"a": np.zeros((9, 4096), np.uint8), "w": a[::-1].copy()})
    np.testing.assert_array_equal(hugepages.Arena(a.nbytes).copy(got.reshape(-1)), a.reshape(-1))
    path.unlink()
    np.testing.assert_array_equal(hugepages.read_copy(got[2]), a[2])


def test_weight_reader_pins_matrices(monkeypatch: pytest.MonkeyPatch) -> None:
    from modelc.models.tiny import make_tiny_llama
    from modelc.models.weights import WeightReader

    monkeypatch.setenv("MODELC_HUGEPAGES", "1")
    model = make_tiny_llama()
    name = "model.layers.0.self_attn.q_proj.weight"
    t = model.tensors[name]
    r = WeightReader(model, kernel_set("numba"))
    assert r.arena is not None
    w = r.matrix(name, *t.shape)
    assert not np.shares_memory(w.blocks, t.data)
    np.testing.assert_array_equal(w.blocks.reshape(-1), t.data)
    monkeypatch.setenv("MODELC_HUGEPAGES", "0")
    w0 = WeightReader(model, kernel_set("numba")).matrix(name, *t.shape)
    assert np.shares_memory(w0.blocks, t.data)
    assert WeightReader(model, kernel_set("ref")).arena is None
