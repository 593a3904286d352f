"""The writer's fast path: kernel copies of mapped source tensors, hashes on the pool, and its fallbacks."""

from __future__ import annotations

import errno
import hashlib
import os

import blake3
import numpy as np
import pytest

import modelc.artifact.hash_pool as hp
import modelc.artifact.writer as w
from modelc.artifact import open_artifact
from modelc.artifact.tiny import make_model
from modelc.artifact.writer import ArtifactWriteError, write_artifact
from modelc.errors import UnsupportedError
from modelc.formats.detect import read_model
from modelc.formats.export_safetensors import export_safetensors
from modelc.ir import DataType, Model, TensorData
from modelc.pack import pack

needs_copy_range = pytest.mark.skipif(not hasattr(os, "copy_file_range"), reason="no copy_file_range")


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(w, "CHUNK_BYTES", 4096)  # many chunks per tensor
    monkeypatch.setattr(hp, "CHUNK_BYTES", 4096)


@pytest.fixture
def copies(monkeypatch):
    """Count os.copy_file_range calls; set `.fail` to an errno to make call number `.at` fail."""

    class Spy:
        calls, fail, at = 0, None, 1

    real = os.copy_file_range

    def spy(*args):
        Spy.calls += 1
        if Spy.fail is not None and Spy.calls >= Spy.at:
            raise OSError(Spy.fail, os.strerror(Spy.fail))
        return real(*args)

    monkeypatch.setattr(os, "copy_file_range", spy, raising=False)
    return Spy


def source(tmp_path, name="src.safetensors"):
    rng = np.random.default_rng(7)
    tensors = {
        "a.weight": TensorData.from_array(rng.standard_normal((96, 64)).astype(np.float32)),  # 24 KiB: 6 chunks
        "b.weight": TensorData.from_array(rng.standard_normal((33, 17)).astype(np.float16)),  # odd size
        "c.bias": TensorData.from_array(np.zeros(0, np.float32)),
        "d.norm": TensorData.from_array(np.ones(64, np.float32)),
    }
    return export_safetensors(Model("src", "llama", tensors), tmp_path / name)


def assert_same_tensors(path, want: Model):
    art = open_artifact(path, verify=True)  # every sha256 checked
    assert sorted(art.tensors) == sorted(want.tensors)
    for n, t in want.tensors.items():
        assert bytes(art.tensors[n].data) == bytes(t.data), n


@needs_copy_range
def test_mapped_tensors_are_copied_by_the_kernel(tmp_path, copies):
    src = source(tmp_path)
    out = pack(src, out=tmp_path / "o.modelc", source_hash=True)
    assert copies.calls >= 6
    assert_same_tensors(out, read_model(src))
    want = hashlib.sha256(open(src, "rb").read()).hexdigest()
    assert open_artifact(out).provenance["source_sha256"] == want


@needs_copy_range
@pytest.mark.parametrize("err", [errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP])
def test_copy_range_unsupported_falls_back_to_writes(tmp_path, copies, err):
    copies.fail = err
    src = source(tmp_path)
    out = pack(src, out=tmp_path / "o.modelc")
    assert copies.calls == 1  # not tried again for the other tensors
    assert_same_tensors(out, read_model(src))


@needs_copy_range
def test_disk_full_during_a_copy_leaves_nothing(tmp_path, copies):
    copies.fail, copies.at = errno.ENOSPC, 3
    src = source(tmp_path)
    dest = tmp_path / "o.modelc"
    dest.write_bytes(b"old")
    with pytest.raises(ArtifactWriteError, match="No space left"):
        pack(src, out=dest)
    assert sorted(os.listdir(tmp_path)) == ["o.modelc", "src.safetensors"] and dest.read_bytes() == b"old"


@needs_copy_range
def test_source_replaced_after_mapping_is_not_copied_from_the_new_file(tmp_path, copies):
    src = source(tmp_path)
    model = read_model(src)  # tensors map the original file
    other = source(tmp_path, "other.safetensors")
    data = bytearray(open(other, "rb").read())
    data[-100:] = b"\xff" * 100  # same layout, different bytes
    open(other, "wb").write(bytes(data))
    os.replace(other, src)
    out = write_artifact(model, tmp_path / "o.modelc")
    assert copies.calls == 0
    assert_same_tensors(out, model)


def test_in_memory_tensors_are_written_from_memory(tmp_path, copies):
    model = make_model()
    out = write_artifact(model, tmp_path / "m.modelc")
    assert copies.calls == 0
    assert_same_tensors(out, model)


def test_copy_on_write_map_is_written_from_memory(tmp_path, copies):
    path = tmp_path / "raw.bin"
    path.write_bytes(bytes(range(256)) * 64)
    mm = np.memmap(path, dtype=np.uint8, mode="c")
    mm[:16] = 7  # only in this process: the file still has 0..15
    model = Model("cow", "mlp", {"w": TensorData((16384,), DataType.U8, mm)})
    out = write_artifact(model, tmp_path / "m.modelc")
    assert copies.calls == 0
    assert bytes(open_artifact(out, verify=True).tensors["w"].data[:16]) == b"\x07" * 16


def test_hash_pool_matches_hashlib(tmp_path):
    pool = hp.HashPool(2)
    bufs = [
        np.random.default_rng(i).integers(0, 256, n, dtype=np.uint8) for i, n in enumerate([0, 1, 4095, 4096, 50_000])
    ]
    path = tmp_path / "f.bin"
    path.write_bytes(b"abc" * 10_000)
    empty = tmp_path / "e.bin"
    empty.write_bytes(b"")
    jobs = [pool.submit(b, "sha256") for b in bufs] + [pool.submit(b"bytes too", "sha256")]
    b3jobs = [pool.submit(b) for b in bufs]  # BLAKE3: the format's tensor digest
    fjob, ejob = pool.submit_file(path), pool.submit_file(empty)
    assert [j.result() for j in jobs] == [hashlib.sha256(b).hexdigest() for b in [*bufs, b"bytes too"]]
    assert [j.result() for j in b3jobs] == [blake3.blake3(b.tobytes()).hexdigest() for b in bufs]
    assert fjob.result() == hashlib.sha256(b"abc" * 10_000).hexdigest()
    assert ejob.result() == hashlib.sha256(b"").hexdigest()
    with pytest.raises(FileNotFoundError):
        pool.submit_file(tmp_path / "missing").result()


def test_cancelled_jobs_stop(tmp_path):
    pool = hp.HashPool(1)
    big = np.zeros(4096 * 200, np.uint8)
    jobs = [pool.submit(big) for _ in range(5)]
    for j in jobs:
        j.cancel()
    for j in jobs:
        try:
            j.result()  # the one a worker already held may have finished
        except hp.HashCancelled:
            pass
    assert pool._jobs == []


def test_failed_pack_cancels_the_source_hash(tmp_path):
    src = source(tmp_path)
    with pytest.raises(UnsupportedError):
        pack(src, out=tmp_path / "o.modelc", arch="nope", source_hash=True)
    assert all(j.path != str(src) for j in hp.hash_pool()._jobs)
    assert not (tmp_path / "o.modelc").exists()
