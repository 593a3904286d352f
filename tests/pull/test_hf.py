"""Pulls from a fake Hugging Face Hub (HF_ENDPOINT -> 127.0.0.1) through huggingface_hub."""

from __future__ import annotations

import hashlib

import pytest

from modelc import pull, store
from modelc.artifact.reader import open_artifact, read_header_only
from modelc.errors import ChecksumError, NotFoundError
from modelc.pull.download import GatedError, TooLargeError

from .models import split_gguf, tiny_gguf, tiny_hf_folder


@pytest.fixture
def gguf_bytes(tmp_path):
    return tiny_gguf(tmp_path / "t.gguf")


def _repo(hub, gguf_bytes, **kw):
    files = {
        "README.md": b"# tiny\n",
        "tiny-Q8_0.gguf": gguf_bytes,
        "tiny-Q4_K_M.gguf": gguf_bytes,
        "mmproj-tiny-f16.gguf": b"not a model" * 200,
    }
    return hub.add("org/tiny-GGUF", files, **kw)


def _events():
    seen = []
    return seen, seen.append


def test_default_quant_is_q4_k_m_through_the_blob_store(hub, gguf_bytes):
    _repo(hub, gguf_bytes)
    seen, report = _events()
    path = pull.pull("hf.co/org/tiny-GGUF", report)
    assert path == store.active_path("hf.co/org/tiny-GGUF") and path.is_file()
    art = open_artifact(path)
    assert art.architecture == "llama" and art.chat_template
    assert art.metadata["modelc.pull"]["ref"] == "hf.co/org/tiny-GGUF"
    assert "tiny-Q4_K_M.gguf" in art.metadata["modelc.pull"]["digest"]
    # metadata from the Hub API, HEAD on resolve (302 to the blob store), GET from the blob store only
    assert ("GET", "/api/models/org/tiny-GGUF/revision/main", None) in hub.requests
    assert any(m == "HEAD" and p.endswith("/resolve/" + hub.repos["org/tiny-GGUF"].sha + "/tiny-Q4_K_M.gguf")
               for m, p, _ in hub.requests)  # fmt: skip
    assert not any(m == "GET" and "/resolve/" in p for m, p, _ in hub.requests)
    assert hub.blobs.faults.requests == [(f"/blobs/{hashlib.sha256(gguf_bytes).hexdigest()}", None)]
    statuses = [e.status for e in seen]
    assert statuses[0] == "pulling manifest" and statuses[-1] == "success"
    done = [e for e in seen if e.status == "downloading tiny-Q4_K_M.gguf"]
    assert done[-1].completed == done[-1].total == len(gguf_bytes)
    assert done[-1].digest == f"sha256:{hashlib.sha256(gguf_bytes).hexdigest()}"
    assert not (store.home() / "downloads" / "hf").exists() or not any((store.home() / "downloads" / "hf").iterdir())


def test_quant_is_case_insensitive_and_a_second_pull_downloads_nothing(hub, gguf_bytes):
    _repo(hub, gguf_bytes)
    a = pull.pull("hf.co/org/tiny-GGUF:q8_0")
    assert a == store.active_path("hf.co/org/tiny-GGUF-Q8_0")
    n = len(hub.blobs.faults.requests)
    b = pull.pull("hf.co/org/tiny-GGUF:Q8_0")
    assert b == a and len(hub.blobs.faults.requests) == n and store.versions("hf.co/org/tiny-GGUF-Q8_0") == []
    path, name = pull.ensure("hf.co/org/tiny-GGUF:Q8_0")  # in the store: no request at all
    assert (path, name) == (a, "hf.co/org/tiny-GGUF-Q8_0")


def test_closest_quant_when_q4_k_m_is_absent(hub, gguf_bytes):
    hub.add("org/r", {"r-Q8_0.gguf": gguf_bytes, "r-Q5_K_M.gguf": gguf_bytes, "r-F16.gguf": gguf_bytes})
    pull.pull("hf.co/org/r")
    assert "r-Q5_K_M.gguf" in read_header_only(store.active_path("hf.co/org/r")).metadata["modelc.pull"]["digest"]


def test_missing_quant_lists_what_the_repo_has(hub, gguf_bytes):
    _repo(hub, gguf_bytes)
    with pytest.raises(NotFoundError, match=r"no IQ2_XS GGUF \(it has: Q4_K_M, Q8_0\)"):
        pull.pull("hf.co/org/tiny-GGUF:iq2_xs")


def test_split_gguf_downloads_every_part_and_reads_them_as_one(hub, tmp_path):
    parts = split_gguf(tmp_path, "big-Q4_K_M")
    assert len(parts) == 3
    hub.add("org/big", {p.name: p.read_bytes() for p in parts})
    seen, report = _events()
    path = pull.pull("hf.co/org/big", report)
    art = open_artifact(path)
    assert len(art.tensors) == 12
    downloaded = {e.status for e in seen if e.status.startswith("downloading")}
    assert downloaded == {f"downloading {p.name}" for p in parts}


def test_a_split_part_missing_from_the_repo(hub, tmp_path):
    parts = split_gguf(tmp_path, "big-Q4_K_M")
    hub.add("org/big", {p.name: p.read_bytes() for p in parts[:2]})
    with pytest.raises(NotFoundError, match="lacks part"):
        pull.pull("hf.co/org/big")


def test_hf_uri_names_one_file(hub, gguf_bytes):
    _repo(hub, gguf_bytes)
    path = pull.pull("hf://org/tiny-GGUF/tiny-Q8_0.gguf")
    assert path == store.active_path("hf.co/org/tiny-GGUF/tiny-Q8_0")


def test_safetensors_repo_is_packed_as_an_hf_folder(hub, tmp_path):
    files = tiny_hf_folder(tmp_path / "folder")
    files["README.md"] = b"# card"
    files["pytorch_model.bin"] = b"pickle" * 10  # never downloaded
    hub.add("org/tiny-hf", files)
    path = pull.pull("hf://org/tiny-hf")
    art = open_artifact(path)
    assert art.architecture == "llama" and art.chat_template and art.tokenizer_json
    got = {p.rsplit("/", 1)[-1] for m, p, _ in hub.requests if m == "HEAD"}
    assert got == {"config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"}


def test_interrupted_download_resumes_with_range(hub, gguf_bytes, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 4096)  # the library keeps whole chunks it received
    _repo(hub, gguf_bytes)
    sha = hashlib.sha256(gguf_bytes).hexdigest()
    hub.blobs.faults.drop_after[sha] = 20_000  # the connection drops after 20 kB, once
    pull.pull("hf.co/org/tiny-GGUF:Q8_0")
    ranges = [r for p, r in hub.blobs.faults.requests if p.endswith(sha)]
    assert ranges[0] is None and ranges[-1] in ("bytes=16384-", "bytes=20000-")
    assert open_artifact(store.active_path("hf.co/org/tiny-GGUF-Q8_0"), verify=True)


def test_a_part_left_by_an_earlier_pull_is_resumed(hub, gguf_bytes):
    repo = _repo(hub, gguf_bytes)
    folder = store.home() / "downloads" / "hf" / f"org--tiny-GGUF--{repo.sha[:12]}"
    folder.mkdir(parents=True)
    (folder / "tiny-Q8_0.gguf.part").write_bytes(gguf_bytes[:30_000])
    pull.pull("hf.co/org/tiny-GGUF:Q8_0")
    sha = hashlib.sha256(gguf_bytes).hexdigest()
    assert [r for p, r in hub.blobs.faults.requests if p.endswith(sha)] == ["bytes=30000-"]


def test_wrong_sha256_is_refused_and_nothing_enters_the_store(hub, gguf_bytes):
    _repo(hub, gguf_bytes)
    hub.blobs.faults.corrupt.add(hashlib.sha256(gguf_bytes).hexdigest())
    with pytest.raises(ChecksumError, match="sha256 does not match"):
        pull.pull("hf.co/org/tiny-GGUF")
    assert not store.exists("hf.co/org/tiny-GGUF") and store.list_models() == []
    assert not list((store.home() / "downloads").rglob("*.gguf*"))  # the bad part is gone too


def test_a_body_larger_than_declared_is_stopped(hub, gguf_bytes):
    _repo(hub, gguf_bytes)
    hub.blobs.faults.extra[hashlib.sha256(gguf_bytes).hexdigest()] = 5_000_000
    with pytest.raises(TooLargeError, match="more than the"):
        pull.pull("hf.co/org/tiny-GGUF")
    assert store.list_models() == []
    assert all(p.stat().st_size == 0 for p in (store.home() / "downloads").rglob("*.part"))


def test_missing_repo_and_missing_file(hub, gguf_bytes):
    with pytest.raises(NotFoundError, match="no such repo"):
        pull.pull("hf.co/org/nothing")
    _repo(hub, gguf_bytes)
    with pytest.raises(NotFoundError, match="has no file"):
        pull.pull("hf://org/tiny-GGUF/other.gguf")


def test_a_blob_the_store_lost_is_a_404(hub, gguf_bytes):
    _repo(hub, gguf_bytes)
    del hub.blobs.blobs[hashlib.sha256(gguf_bytes).hexdigest()]
    with pytest.raises(NotFoundError, match=r"not found at 127.0.0.1:\d+ or its blob store \(404\)"):
        pull.pull("hf.co/org/tiny-GGUF")
    assert store.list_models() == []


def test_gated_repo_says_what_to_do_and_a_token_is_sent_to_the_hub_only(hub, gguf_bytes, monkeypatch):
    _repo(hub, gguf_bytes, gated=True)
    with pytest.raises(GatedError, match="gated: accept its terms on the Hub, then set HF_TOKEN") as e:
        pull.pull("hf.co/org/tiny-GGUF")
    assert e.value.http_status == 401 and store.list_models() == []
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    pull.pull("hf.co/org/tiny-GGUF")
    heads = [a for m, p, a in hub.requests if m == "HEAD"]
    assert heads[-1] == "Bearer hf_test_token"
    assert hub.blobs.auth and not any(hub.blobs.auth)  # the blob store (another origin) never gets the token


def test_search_lists_gguf_repos(hub, gguf_bytes):
    _repo(hub, gguf_bytes, downloads=5)
    hub.add("org/other-GGUF", {"o-Q4_0.gguf": gguf_bytes}, downloads=9)
    hub.add("org/plain", {"config.json": b"{}"})
    from modelc.pull import hf

    assert [r for r, _, _ in hf.search("gguf")] == ["org/other-GGUF", "org/tiny-GGUF"]
