from __future__ import annotations

import errno
import os
import zipfile

import numpy as np
import pytest

from modelc.artifact import ArtifactWriteError, open_artifact, verify_artifact, write_artifact
from modelc.artifact.tiny import make_model
from modelc.errors import ArtifactError, ChecksumError, ModelcError
from modelc.ir import Model, TensorData

from .helpers import read_raw, rewrite_header


@pytest.mark.parametrize("compress", [None, "zstd"])
def test_roundtrip_bytes_identical(tmp_path, compress):
    model = make_model()
    path = write_artifact(model, tmp_path / "m.modelc", compress=compress)
    art = open_artifact(path, verify=True)
    assert sorted(art.tensors) == sorted(model.tensors)
    for name, t in model.tensors.items():
        got = art.tensors[name]
        assert got.shape == t.shape and got.dtype is t.dtype
        assert bytes(got.data) == bytes(t.data)
    assert art.name == "tiny" and art.architecture == "llama"
    assert art.config == model.config and art.special_tokens == model.special_tokens
    assert art.tokenizer_json == model.tokenizer_json and art.chat_template == model.chat_template
    assert art.num_params == model.num_params and art.total_bytes == model.total_bytes
    assert art.provenance["source_format"] == "safetensors" and art.provenance["modelc_version"]
    assert art.file_size == os.path.getsize(path)


def test_layout_offsets_aligned_sorted_and_zero_copy(tmp_path):
    path = write_artifact(make_model(), tmp_path / "m.modelc")
    version, header, raw = read_raw(path)
    assert raw[:8] == b"MODELC\0\0" and version == 1
    names = [t["name"] for t in header["tensors"]]
    assert names == sorted(names)
    assert all(t["offset"] % 64 == 0 and t["compression"] == "none" for t in header["tensors"])
    art = open_artifact(path)
    t = art.tensors["model.norm.weight"]
    assert isinstance(t.data.base, np.memmap) or isinstance(t.data, np.memmap)
    assert not t.data.flags.writeable


def test_zstd_shrinks_compressible_and_keeps_incompressible_raw(tmp_path):
    model = make_model()
    path = write_artifact(model, tmp_path / "m.modelc", compress="zstd", level=5)
    _, header, _ = read_raw(path)
    by = {t["name"]: t for t in header["tensors"]}
    assert by["model.norm.weight"]["compression"] == "zstd"
    assert by["model.norm.weight"]["stored_nbytes"] < by["model.norm.weight"]["nbytes"]
    assert by["model.layers.0.self_attn.q_proj.weight"]["compression"] == "none"  # random bytes


def test_unknown_version_refused(tmp_path):
    path = write_artifact(make_model(), tmp_path / "m.modelc")
    _, header, _ = read_raw(path)
    rewrite_header(path, header, version=7)
    with pytest.raises(ArtifactError, match="unsupported .modelc version 7; this modelc reads 1"):
        open_artifact(path)


def test_bad_magic_and_short_file(tmp_path):
    p = tmp_path / "x.modelc"
    p.write_bytes(b"GGUF" + b"\0" * 100)
    with pytest.raises(ArtifactError, match="not a .modelc file"):
        open_artifact(p)
    p.write_bytes(b"MODELC")
    with pytest.raises(ArtifactError, match="too short"):
        open_artifact(p)


def test_truncated_file_and_header_len_bounds(tmp_path):
    path = write_artifact(make_model(), tmp_path / "m.modelc")
    raw = open(path, "rb").read()
    open(path, "wb").write(raw[:-10])
    with pytest.raises(ArtifactError, match="outside the data region"):
        open_artifact(path)
    open(path, "wb").write(raw[:12] + (10**9).to_bytes(8, "little") + raw[20:])
    with pytest.raises(ArtifactError, match="header length"):
        open_artifact(path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t[1].update(offset=t[1]["offset"] + 4), "not 64-byte aligned"),
        (lambda t: t[1].update(name=t[0]["name"]), "duplicate tensor"),
        (lambda t: t[1].update(nbytes=t[1]["nbytes"] + 1), "needs"),
        (lambda t: t[1].update(dtype="Q9_9"), "unsupported type Q9_9"),
        (lambda t: t[1].update(compression="lz4"), "unknown compression"),
        (lambda t: t[1].update(shape=[-1]), "bad shape"),
        (lambda t: t[1].pop("blake3"), "lacks field blake3"),
        (lambda t: t[1].update(blake3="ab"), "bad blake3 digest"),
        (lambda t: t[1].update(offset=0), "outside the data region"),
    ],
)
def test_corrupt_table_rejected(tmp_path, change, message):
    path = write_artifact(make_model(), tmp_path / "m.modelc")
    _, header, _ = read_raw(path)
    change(header["tensors"])
    rewrite_header(path, header)
    with pytest.raises(ArtifactError, match=message):
        open_artifact(path)


def test_header_not_json(tmp_path):
    path = write_artifact(make_model(), tmp_path / "m.modelc")
    raw = bytearray(open(path, "rb").read())
    raw[20] = ord("#")
    open(path, "wb").write(bytes(raw))
    with pytest.raises(ArtifactError, match="not valid JSON"):
        open_artifact(path)


@pytest.mark.parametrize("compress", [None, "zstd"])
def test_verify_names_corrupt_tensor(tmp_path, compress):
    path = write_artifact(make_model(), tmp_path / "m.modelc", compress=compress)
    _, header, raw = read_raw(path)
    entry = next(t for t in header["tensors"] if t["name"] == "model.norm.weight")
    buf = bytearray(raw)
    buf[entry["offset"] + 1] ^= 0xFF
    open(path, "wb").write(bytes(buf))
    report = verify_artifact(path)
    assert not report.ok and report.bad_tensors == ("model.norm.weight",)
    with pytest.raises(ChecksumError, match="model.norm.weight"):
        open_artifact(path, verify=True)
    good = write_artifact(make_model(), tmp_path / "g.modelc", compress=compress)
    seen = []
    assert verify_artifact(good, progress=lambda d, t: seen.append((d, t))).ok
    assert seen[-1][0] == seen[-1][1]


def _half_random_model() -> Model:
    """One zstd tensor whose first half is random bytes: zstd stores them as raw literals, so a flipped
    byte there still decompresses, to wrong data (what only the frame's checksum can catch)."""
    rng = np.random.default_rng(0)
    w = np.concatenate([rng.integers(0, 256, 4096, dtype=np.uint8), np.zeros(4096, np.uint8)])
    return Model("half", "mlp", {"w": TensorData.from_array(w)}, config={})


def _flip_stored_byte(path, at: int) -> None:
    _, header, raw = read_raw(path)
    (entry,) = header["tensors"]
    assert entry["compression"] == "zstd"
    buf = bytearray(raw)
    buf[entry["offset"] + at] ^= 0xFF
    open(path, "wb").write(bytes(buf))


def test_corrupt_zstd_tensor_is_refused_at_load_without_verify(tmp_path):
    path = write_artifact(_half_random_model(), tmp_path / "m.modelc", compress="zstd")
    _flip_stored_byte(path, 2000)  # inside the random half's raw literals
    with pytest.raises(ChecksumError, match=r"tensor w is corrupt: .* zstd checksum$"):
        open_artifact(path)


def test_zstd_tensor_without_checksum_still_loads(tmp_path, monkeypatch):
    import zstandard

    import modelc.artifact.writer as w

    monkeypatch.setattr(w, "_zstd", lambda level: zstandard.ZstdCompressor(level=level, write_content_size=True))
    model = _half_random_model()
    path = write_artifact(model, tmp_path / "old.modelc", compress="zstd")  # as files before the checksum
    assert bytes(open_artifact(path, verify=True).tensors["w"].data) == bytes(model.tensors["w"].data)


def test_disk_full_leaves_nothing(tmp_path, monkeypatch):
    dest = tmp_path / "m.modelc"
    dest.write_bytes(b"old")
    import modelc.artifact.writer as w

    real = w._write_tensor
    calls = []

    def full(f, *args):
        calls.append(1)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(f, *args)

    monkeypatch.setattr(w, "_write_tensor", full)
    with pytest.raises(ArtifactWriteError, match="No space left"):
        write_artifact(make_model(), dest)
    assert sorted(os.listdir(tmp_path)) == ["m.modelc"] and dest.read_bytes() == b"old"


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_directory(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(ArtifactWriteError, match="cannot write"):
            write_artifact(make_model(), ro / "m.modelc")
        assert os.listdir(ro) == []
    finally:
        ro.chmod(0o755)


def test_bad_options_and_metadata(tmp_path):
    with pytest.raises(ArtifactWriteError, match="unknown compression"):
        write_artifact(make_model(), tmp_path / "m.modelc", compress="lz4")
    model = make_model()
    model.metadata["bad"] = object()
    with pytest.raises(ModelcError, match="JSON"):
        write_artifact(model, tmp_path / "m.modelc")
    assert os.listdir(tmp_path) == []


def test_open_inside_a_zip_member(tmp_path):
    path = write_artifact(make_model(), tmp_path / "m.modelc")
    z = tmp_path / "a.zip"
    with zipfile.ZipFile(z, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr("pad.txt", b"x" * 37)
        zf.write(path, "model.modelc")
    with zipfile.ZipFile(z) as zf:
        info = zf.getinfo("model.modelc")
    raw = open(z, "rb").read()
    start = info.header_offset + 30 + int.from_bytes(raw[info.header_offset + 26 : info.header_offset + 28], "little")
    start += int.from_bytes(raw[info.header_offset + 28 : info.header_offset + 30], "little")
    art = open_artifact(z, verify=True, offset=start, length=info.file_size)
    assert bytes(art.tensors["model.norm.weight"].data) == bytes(make_model().tensors["model.norm.weight"].data)
    with pytest.raises(ArtifactError, match="outside the file"):
        open_artifact(z, offset=start, length=info.file_size + 10**6)


def test_missing_directory_and_read_only_filesystem(tmp_path):
    with pytest.raises(ArtifactWriteError, match="cannot write"):
        write_artifact(make_model(), tmp_path / "nope" / "m.modelc")
    with pytest.raises(ArtifactWriteError, match="cannot write"):
        write_artifact(make_model(), "/proc/m.modelc")
