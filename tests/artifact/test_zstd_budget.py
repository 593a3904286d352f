"""A small .modelc cannot make inspect/verify/run inflate gigabytes: zstd tensors are bounded by a
budget relative to the file size, checked before anything is decompressed (artifact/reader.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from modelc.artifact import reader
from modelc.artifact.reader import open_artifact, read_header_only, zstd_budget_bytes
from modelc.artifact.verify import verify_artifact
from modelc.artifact.writer import write_artifact
from modelc.errors import ArtifactError
from modelc.ir import Model, TensorData


def bomb(tmp_path, nbytes: int):
    """An artifact whose one zstd tensor is `nbytes` of zeros (it compresses ~1000x)."""
    model = Model(
        name="bomb", architecture="mlp", config={},
        tensors={"w": TensorData.from_array(np.zeros(nbytes // 4, np.float32))},
    )  # fmt: skip
    return Path(write_artifact(model, tmp_path / "bomb.modelc", compress="zstd"))


def test_budget_is_relative_to_the_file() -> None:
    assert zstd_budget_bytes(1000) == reader.ZSTD_FLOOR_BYTES
    assert zstd_budget_bytes(1 << 30) == reader.ZSTD_MAX_RATIO << 30


def test_inflating_artifact_is_refused_everywhere(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(reader, "ZSTD_FLOOR_BYTES", 1 << 20)  # scale the floor down so the test stays small
    path = bomb(tmp_path, 8 << 20)  # 8 MiB declared, a few KB on disk
    size = path.stat().st_size
    assert size * reader.ZSTD_MAX_RATIO < 8 << 20 and read_header_only(path).entries["w"].compression == "zstd"
    with pytest.raises(ArtifactError, match="refusing to decompress"):
        open_artifact(path)  # run and inspect
    with pytest.raises(ArtifactError, match="refusing to decompress"):
        open_artifact(path, verify=True)
    with pytest.raises(ArtifactError, match="refusing to decompress"):
        verify_artifact(path)  # `modelc verify` no longer says ok


def test_within_budget_still_opens(tmp_path) -> None:
    path = bomb(tmp_path, 1 << 20)
    art = open_artifact(path, verify=True)
    assert art.tensors["w"].nbytes == 1 << 20
