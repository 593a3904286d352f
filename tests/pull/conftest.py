from __future__ import annotations

import pytest

from .fake_servers import BlobStore, FakeHub


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh $MODELC_HOME (and HF home, so no saved Hub token is read)."""
    monkeypatch.setenv("MODELC_HOME", str(tmp_path / "modelc"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    return tmp_path / "modelc"


@pytest.fixture
def blobs():
    store = BlobStore()
    yield store
    store.shutdown()


@pytest.fixture
def hub(home, blobs, monkeypatch):
    """A fake Hub on 127.0.0.1 (HF_ENDPOINT points at it) with its blob store on another port."""
    server = FakeHub(blobs)
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    yield server
    server.shutdown()
