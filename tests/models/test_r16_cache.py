"""models/r16_cache.py: a second load of a model file maps the repacked weights the first one wrote."""

from __future__ import annotations

import mmap
import os

import numpy as np
import pytest

from modelc.artifact import write_artifact
from modelc.artifact.reader import open_artifact
from modelc.artifact.transforms import plan
from modelc.engine.runner import Runner
from modelc.kernels.runtime import hugepages
from modelc.models import r16_cache
from modelc.models.tiny import make_tiny_llama


@pytest.fixture
def art(tmp_path, monkeypatch):
    monkeypatch.setenv("MODELC_REPACK_CACHE_DIR", str(tmp_path / "r16"))
    monkeypatch.delenv("MODELC_REPACK_CACHE", raising=False)
    monkeypatch.delenv("MODELC_REPACK", raising=False)
    monkeypatch.setenv("MODELC_HUGEPAGES", "0")  # no huge pages (see the last test)
    monkeypatch.setattr(r16_cache, "_stores", {})  # a fresh process's view
    src = make_tiny_llama(3)
    src.tensors, _ = plan(src.tensors, prune=None, quantize="q4_0", quantize_embeddings=True, quantize_output=True)
    return write_artifact(src, tmp_path / "tiny-q4_0.modelc")


def _r16(runner) -> list[np.ndarray]:
    layer = runner.model.layers[0]
    return [w.r16 for w in (layer.q, layer.k, layer.v, layer.o, layer.gate, layer.up, layer.down)]


def _mapped(a: np.ndarray) -> bool:
    while a is not None and not isinstance(a, mmap.mmap):
        a = getattr(a, "base", None) if isinstance(a, np.ndarray) else getattr(a, "obj", None)
    return isinstance(a, mmap.mmap)


def _new_process(monkeypatch) -> None:
    monkeypatch.setattr(r16_cache, "_stores", {})


def test_a_second_load_maps_what_the_first_repacked(art, tmp_path, monkeypatch):
    first = Runner(open_artifact(art), num_kv_blocks=4)
    r16_cache.flush(wait=True)
    files = list((tmp_path / "r16").glob("*.r16"))
    assert len(files) == 1 and not any(_mapped(a) for a in _r16(first))
    _new_process(monkeypatch)
    second = Runner(open_artifact(art), num_kv_blocks=4)
    assert all(_mapped(a) and a.flags.writeable for a in _r16(second))
    assert all(np.array_equal(a, b) for a, b in zip(_r16(first), _r16(second), strict=True))
    assert np.array_equal(first.logits([1, 2, 3]), second.logits([1, 2, 3]))


def test_a_broken_cache_file_is_ignored_then_replaced(art, tmp_path, monkeypatch):
    want = Runner(open_artifact(art), num_kv_blocks=4).logits([4, 5])
    r16_cache.flush(wait=True)
    (side,) = (tmp_path / "r16").glob("*.r16")
    for broken in (b"", side.read_bytes()[:100], b"MODELC-R16\0\0" + b"\xff" * 64):
        side.write_bytes(broken)
        _new_process(monkeypatch)
        runner = Runner(open_artifact(art), num_kv_blocks=4)
        assert not any(_mapped(a) for a in _r16(runner))
        assert np.array_equal(runner.logits([4, 5]), want)
        r16_cache.flush(wait=True)
        assert r16_cache._read(side)  # written again, whole
    assert not [p for p in (tmp_path / "r16").iterdir() if p.suffix != ".r16"]  # no temp file left


def test_a_changed_model_file_does_not_use_the_old_cache_file(art, tmp_path, monkeypatch):
    Runner(open_artifact(art), num_kv_blocks=4)
    r16_cache.flush(wait=True)
    st = os.stat(art)
    os.utime(art, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    _new_process(monkeypatch)
    runner = Runner(open_artifact(art), num_kv_blocks=4)
    assert not any(_mapped(a) for a in _r16(runner))


def test_off_switch(art, tmp_path, monkeypatch):
    monkeypatch.setenv("MODELC_REPACK_CACHE", "0")
    Runner(open_artifact(art), num_kv_blocks=4)
    r16_cache.flush(wait=True)
    assert not (tmp_path / "r16").exists()


def test_only_the_most_recently_used_files_are_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("MODELC_REPACK_CACHE_DIR", str(tmp_path))
    for i in range(r16_cache.KEEP + 2):
        assert r16_cache._write(tmp_path / f"{i}.r16", {"a": np.full((2, 64), i, np.uint8)})
        os.utime(tmp_path / f"{i}.r16", (i, i))
    r16_cache._prune(tmp_path)
    kept = sorted(p.name for p in tmp_path.glob("*.r16"))
    assert kept == [f"{i}.r16" for i in range(2, r16_cache.KEEP + 2)]
    assert np.array_equal(r16_cache._read(tmp_path / "4.r16")["a"], np.full((2, 64), 4, np.uint8))


def test_a_second_load_queues_the_cache_files_pages_for_huge_pages(art, monkeypatch):
    """With huge pages on, the weights are still served from the cache file's mapping, whose pages move onto
    huge pages in place (hugepages.promote), the same bytes at the same addresses."""
    monkeypatch.setenv("MODELC_HUGEPAGES", "1")
    first = Runner(open_artifact(art), num_kv_blocks=4)
    r16_cache.flush(wait=True)
    _new_process(monkeypatch)
    queued = []
    real = hugepages.promote
    monkeypatch.setattr(hugepages, "promote", lambda a: queued.append(a) or real(a))
    second = Runner(open_artifact(art), num_kv_blocks=4)
    assert hugepages.wait(60)
    got = _r16(second)
    assert all(_mapped(a) and hugepages.file_place(a)[0].endswith(".r16") for a in got)
    assert all(any(np.shares_memory(a, q) for q in queued) for a in got)
    assert all(np.array_equal(a, b) for a, b in zip(_r16(first), got, strict=True))
    assert np.array_equal(first.logits([1, 2, 3]), second.logits([1, 2, 3]))
