"""How a replica finds its artifact: the shared path, else the operator's registry entry with the
same SHA-256; any other file is refused. No Ray needed."""

from __future__ import annotations

import pytest

from modelc import registry
from modelc.artifact.writer import write_artifact
from modelc.config import ReplicaConfig
from modelc.errors import ChecksumError, NotFoundError
from modelc.replicas.engine import _registry_entry
from modelc.replicas.replica import ModelRef, fetch_model, file_sha256
from tests.server.tiny_model import make_served_model


@pytest.fixture
def artifact(tmp_path, monkeypatch):
    monkeypatch.setenv("MODELC_HOME", str(tmp_path / "node-home"))
    monkeypatch.delenv("MODELC_REGISTRY", raising=False)
    path = tmp_path / "front" / "tiny.modelc"
    path.parent.mkdir()
    write_artifact(make_served_model(), path)
    return path


def test_a_node_without_the_file_pulls_the_registry_entry_with_the_same_sha(artifact, tmp_path):
    reg = tmp_path / "registry"
    entry = registry.add(reg, artifact)
    sha = file_sha256(artifact)
    assert _registry_entry(ReplicaConfig(registry=str(reg)), sha) == (str(reg), f"{entry.name}:{entry.version}")
    assert _registry_entry(ReplicaConfig(registry=str(reg)), "f" * 64) == (None, None)  # not in it: path only
    assert _registry_entry(ReplicaConfig(), sha) == (None, None)  # no registry configured
    ref = ModelRef(sha256=sha, path=str(tmp_path / "elsewhere.modelc"), registry=str(reg), registry_spec="tiny-llama:1")
    pulled = fetch_model(ref)
    assert pulled != artifact and file_sha256(pulled) == sha


def test_a_different_file_is_refused_wherever_it_comes_from(artifact, tmp_path):
    reg = tmp_path / "registry"
    registry.add(reg, artifact)
    other = tmp_path / "other.modelc"
    write_artifact(make_served_model(seed=1), other)
    want = file_sha256(other)
    with pytest.raises(ChecksumError):
        fetch_model(ModelRef(sha256=want, path=str(artifact)))  # the shared path holds another file
    with pytest.raises(ChecksumError):
        fetch_model(ModelRef(sha256=want, path=None, registry=str(reg), registry_spec="tiny-llama"))
    with pytest.raises(NotFoundError):
        fetch_model(ModelRef(sha256=want, path=str(tmp_path / "missing.modelc")))
