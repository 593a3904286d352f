"""Pulls from a fake Ollama registry ($MODELC_OLLAMA_REGISTRY -> 127.0.0.1) and imports from a fake
~/.ollama/models ($OLLAMA_MODELS)."""

from __future__ import annotations

import hashlib
import json

import pytest

from modelc import pull, store
from modelc.artifact.reader import open_artifact
from modelc.errors import ChecksumError, NotFoundError

from .fake_servers import FakeOllama
from .models import tiny_gguf

GO_TEMPLATE = "{{ if .System }}<|system|>{{ .System }}{{ end }}<|user|>{{ .Prompt }}<|assistant|>"
PARAMS = {"stop": ["▁hi", "<|not-a-token|>"], "temperature": 0.6}  # "▁hi" is token 263 of the tiny vocabulary


@pytest.fixture
def registry(home, blobs, monkeypatch):
    server = FakeOllama(blobs)
    monkeypatch.setenv("MODELC_OLLAMA_REGISTRY", server.url)
    yield server
    server.shutdown()


def _layers(tmp_path, template=True):
    return {"model": tiny_gguf(tmp_path / "m.gguf", template=template), "template": GO_TEMPLATE.encode(),
            "params": json.dumps(PARAMS).encode(), "system": b"Be brief.", "license": b"Apache-2.0"}  # fmt: skip


def test_pull_reads_manifest_and_verified_blobs(registry, tmp_path):
    layers = _layers(tmp_path)
    registry.add("tiny", "1b", layers)
    seen = []
    path = pull.pull("ollama.com/library/tiny:1b", seen.append)
    assert path == store.active_path("ollama.com/library/tiny-1b")
    art = open_artifact(path)
    assert art.chat_template.startswith("{% for m in messages %}")  # the GGUF's Jinja template
    assert art.metadata["modelc.chat_template_source"].startswith("gguf")
    assert art.metadata["ollama.template"] == GO_TEMPLATE and art.metadata["ollama.system"] == "Be brief."
    assert art.special_tokens["eos_token_ids"] == [2, 265, 263]  # </s>, <|end|> (the GGUF's EOT), then "▁hi"
    assert art.metadata["ollama.stop_unused"] == ["<|not-a-token|>"]
    assert "/v2/library/tiny/manifests/1b" in registry.requests
    assert not any("license" in p for p, _ in registry.blobs.faults.requests)
    model_digest = "sha256:" + hashlib.sha256(layers["model"]).hexdigest()
    assert any(e.digest == model_digest and e.completed == e.total for e in seen)


def test_dropped_connection_resumes_with_range(registry, tmp_path):
    layers = _layers(tmp_path)
    registry.add("tiny", "1b", layers)
    sha = hashlib.sha256(layers["model"]).hexdigest()
    registry.blobs.faults.drop_after[sha] = 20_000
    pull.pull("ollama://tiny:1b")
    assert [r for p, r in registry.blobs.faults.requests if p.endswith(sha)] == [None, "bytes=20000-"]
    assert open_artifact(store.active_path("ollama.com/library/tiny-1b"), verify=True)


def test_a_blob_larger_than_its_manifest_says_is_stopped(registry, tmp_path):
    from modelc.pull.download import TooLargeError

    layers = _layers(tmp_path)
    registry.add("tiny", "1b", layers)
    registry.blobs.faults.extra[hashlib.sha256(layers["model"]).hexdigest()] = 5_000_000
    with pytest.raises(TooLargeError, match="more than the"):
        pull.pull("ollama://tiny:1b")
    assert store.list_models() == []
    assert all(p.stat().st_size == 0 for p in (store.home() / "downloads").rglob("*.part"))


def test_short_form_latest_and_no_jinja_template(registry, tmp_path):
    registry.add("tiny", "latest", _layers(tmp_path, template=False))
    art = open_artifact(pull.pull("ollama://tiny"))
    assert art.chat_template is None and art.metadata["modelc.chat_template_source"].startswith("none")
    assert pull.store_name_of("ollama://tiny") == "ollama.com/library/tiny"


def test_wrong_digest_and_unknown_tag(registry, tmp_path):
    layers = _layers(tmp_path)
    registry.add("tiny", "1b", layers)
    registry.blobs.faults.corrupt.add(hashlib.sha256(layers["model"]).hexdigest())
    with pytest.raises(ChecksumError):
        pull.pull("ollama://tiny:1b")
    assert store.list_models() == []
    with pytest.raises(NotFoundError, match="no such model or tag"):
        pull.pull("ollama://tiny:70b")
    del registry.blobs.blobs[hashlib.sha256(layers["model"]).hexdigest()]
    with pytest.raises(NotFoundError, match="not found at the source"):
        pull.pull("ollama://tiny:1b")


def test_import_from_an_ollama_install(home, tmp_path, monkeypatch):
    root = tmp_path / "ollama-models"
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    layers = _layers(tmp_path)
    items = []
    (root / "blobs").mkdir(parents=True)
    for kind, data in layers.items():
        sha = hashlib.sha256(data).hexdigest()
        (root / "blobs" / f"sha256-{sha}").write_bytes(data)
        items.append(
            {"mediaType": f"application/vnd.ollama.image.{kind}", "digest": f"sha256:{sha}", "size": len(data)}
        )
    mdir = root / "manifests" / "registry.ollama.ai" / "library" / "tiny"
    mdir.mkdir(parents=True)
    (mdir / "1b").write_text(json.dumps({"schemaVersion": 2, "layers": items}))
    path = pull.pull("ollama-local:tiny:1b")
    assert path == store.active_path("ollama.com/library/tiny-1b")
    assert open_artifact(path).special_tokens["eos_token_ids"] == [2, 265, 263]
    with pytest.raises(NotFoundError, match="not in the Ollama install"):
        pull.pull("ollama-local:tiny:2b")
    blob = root / "blobs" / f"sha256-{hashlib.sha256(layers['model']).hexdigest()}"
    blob.write_bytes(b"X" + layers["model"][1:])
    assert pull.pull("ollama-local:tiny:1b") == path  # the store has this digest: nothing is read
    store.remove("ollama.com/library/tiny-1b")
    with pytest.raises(ChecksumError, match="does not match its digest"):
        pull.pull("ollama-local:tiny:1b")
