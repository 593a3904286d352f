"""Per-tensor digests: pack writes BLAKE3; verify / open(verify=True) / `modelc verify` / `run --verify`
check either kind; files written with SHA-256 digests (before BLAKE3) still open and verify."""

from __future__ import annotations

import json
import shutil

import blake3
import pytest

from modelc.artifact import open_artifact, write_artifact
from modelc.artifact.reader import read_layout
from modelc.artifact.tiny import make_model
from modelc.artifact.verify import verify_artifact
from modelc.cli.main import main
from modelc.errors import ChecksumError
from modelc.pack import pack
from tests.conftest import FIXTURES

LOCAL = sorted(
    [p.relative_to(FIXTURES) for p in (FIXTURES / "models" / "variants").glob("*/hf")]
    + [p.relative_to(FIXTURES) for p in (FIXTURES / "models" / "variants").glob("*/gguf/*.gguf")]
    + [p.relative_to(FIXTURES) for p in (FIXTURES / "embeddings").glob("tiny_*") if p.is_dir()]
    + [p.relative_to(FIXTURES) for p in (FIXTURES / "onnx").glob("*.onnx")]
)
SHARED_MODELS = [
    "tiny-llama/hf",
    "tiny-llama/gguf/tiny-llama-F32.gguf",
    "tiny-llama/gguf/tiny-llama-Q4_0.gguf",
    "tiny-llama/gguf/tiny-llama-Q8_0.gguf",
    "tiny-llama256/gguf/tiny-llama256-Q4_K_M.gguf",
    "tiny-llama256/gguf/tiny-llama256-Q6_K.gguf",
    "tiny-gpt2/gguf/tiny-gpt2-F32.gguf",
    "tiny-gpt2/gguf/tiny-gpt2-Q8_0.gguf",
]
OLD = FIXTURES / "artifact" / "sha256-era.modelc"  # written by the writer before BLAKE3 (zstd and raw tensors)


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MODELC_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def digest_keys(path) -> set[str]:
    return {k for row in read_layout(path).header["tensors"] for k in ("blake3", "sha256") if k in row}


def assert_blake3_verified(path) -> None:
    assert digest_keys(path) == {"blake3"}
    art = read_layout(path)
    for e in art.entries.values():
        assert e.digest == blake3.blake3(bytes(art.stored_bytes(e.name))).hexdigest(), e.name
    assert verify_artifact(path).ok
    open_artifact(path, verify=True)


@pytest.mark.parametrize("rel", [str(p) for p in LOCAL])
def test_pack_of_every_local_fixture_verifies_with_blake3(home, tmp_path, rel):
    assert_blake3_verified(pack(FIXTURES / rel, out=tmp_path / "m.modelc"))


@pytest.mark.parametrize("rel", SHARED_MODELS)
def test_pack_of_every_shared_fixture_verifies_with_blake3(home, shared_fixtures, tmp_path, rel):
    assert_blake3_verified(pack(shared_fixtures / "models" / rel, out=tmp_path / "m.modelc"))
    assert_blake3_verified(pack(shared_fixtures / "models" / rel, out=tmp_path / "z.modelc", compress="zstd"))


def tamper(path, tensor: str) -> None:
    art = read_layout(path)
    offset = art.entries[tensor].offset + art.entries[tensor].stored_nbytes // 2
    del art
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x40]))


@pytest.mark.parametrize("kind", ["blake3", "sha256"])
def test_a_tampered_byte_is_caught_by_verify_and_run_verify(home, tmp_path, capsys, kind):
    path = write_artifact(make_model(), tmp_path / "m.modelc", digest=kind)
    assert digest_keys(path) == {kind}
    assert main(["verify", str(path)]) == 0
    name = "model.embed_tokens.weight"
    tamper(path, name)
    assert verify_artifact(path).bad_tensors == (name,)
    with pytest.raises(ChecksumError, match=f"{name} does not match its {kind} digest"):
        open_artifact(path, verify=True)
    capsys.readouterr()
    assert main(["verify", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"tensor {name} does not match its digest" in err and len(err.strip().splitlines()) == 1
    assert main(["run", str(path), "--verify", "--port", "0"]) == 1  # refused before anything binds or loads
    assert f"tensor {name} does not match its digest" in capsys.readouterr().err


def test_an_old_sha256_artifact_still_opens_and_verifies(tmp_path, capsys):
    assert digest_keys(OLD) == {"sha256"}
    art = open_artifact(OLD, verify=True)
    assert art.name == "sha256-era" and {e.compression for e in art.entries.values()} == {"none", "zstd"}
    assert art.architecture == "llama" and art.config["num_hidden_layers"] == 1
    assert verify_artifact(OLD).ok and main(["verify", str(OLD)]) == 0
    copy = shutil.copy(OLD, tmp_path / "old.modelc")
    tamper(copy, "model.layers.0.self_attn.q_proj.weight")
    assert verify_artifact(copy).bad_tensors == ("model.layers.0.self_attn.q_proj.weight",)


def test_repacking_an_old_artifact_writes_blake3(home, tmp_path):
    out = pack(OLD, out=tmp_path / "new.modelc")
    assert_blake3_verified(out)
    assert sorted(json.loads(json.dumps(open_artifact(out).config))) == sorted(open_artifact(OLD).config)
