from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

from modelc import store
from modelc.artifact import open_artifact
from modelc.artifact.prune import prune_tensor
from modelc.artifact.quantize import quantize_tensor
from modelc.errors import FormatError, ModelcError
from modelc.formats.detect import read_model
from modelc.formats.export_safetensors import export_safetensors
from modelc.ir import DataType, Model, TensorData
from modelc.pack import pack, pack_model


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MODELC_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def float_model() -> Model:
    rng = np.random.default_rng(3)
    tensors = {
        "model.layers.0.mlp.up_proj.weight": TensorData.from_array(rng.standard_normal((64, 64)).astype(np.float32)),
        "model.layers.0.mlp.down_proj.weight": TensorData.from_array(rng.standard_normal((64, 64)).astype(np.float16)),
        "model.norm.weight": TensorData.from_array(np.ones(64, np.float32)),
    }
    return Model("gen", "llama", tensors, config={"hidden_size": 64})


def same(a: TensorData, b: TensorData) -> bool:
    return a.shape == b.shape and a.dtype is b.dtype and bytes(a.data) == bytes(b.data)


def test_pack_generated_safetensors_bytes_identical(home, tmp_path):
    src = export_safetensors(float_model(), tmp_path / "gen.safetensors")
    out = pack(src, out=tmp_path / "gen.modelc", source_hash=True)
    art = open_artifact(out, verify=True)
    again = read_model(src)
    assert sorted(art.tensors) == sorted(again.tensors)
    assert all(same(art.tensors[n], again.tensors[n]) for n in again.tensors)
    want = hashlib.sha256(open(src, "rb").read()).hexdigest()
    assert art.provenance["source_sha256"] == want and art.provenance["source_format"] == "safetensors"


def test_pack_without_source_hash_records_size_and_mtime(home, tmp_path):
    src = export_safetensors(float_model(), tmp_path / "gen.safetensors")
    art = open_artifact(pack(src, out=tmp_path / "gen.modelc", source_hash=False), verify=True)
    st = os.stat(src)
    assert "source_sha256" not in art.provenance
    assert art.provenance["source_bytes"] == st.st_size and art.provenance["source_mtime_ns"] == st.st_mtime_ns


def test_pack_into_store_and_versions(home, tmp_path):
    src = export_safetensors(float_model(), tmp_path / "gen.safetensors")
    first = pack(src, name="me/gen")
    second = pack(src, name="me/gen", compress="zstd")
    assert first == second == store.active_path("me/gen")
    assert store.versions("me/gen") == [1] and store.active_version("me/gen") == 2
    assert open_artifact(store.resolve("me/gen:1"), verify=True).name == "me/gen"


def test_pack_quantize_and_prune(home, tmp_path):
    model = float_model()
    src = export_safetensors(model, tmp_path / "gen.safetensors")
    result = pack_model(src, out=tmp_path / "q.modelc", quantize="q8_0", prune=0.5)
    art = open_artifact(result.path, verify=True)
    up = "model.layers.0.mlp.up_proj.weight"
    pruned, n_up = prune_tensor(model.tensors[up], 0.5)
    _, n_down = prune_tensor(model.tensors["model.layers.0.mlp.down_proj.weight"], 0.5)
    assert result.num_pruned == n_up + n_down > 0
    assert sorted(result.quantized) == ["model.layers.0.mlp.down_proj.weight", up]
    assert art.tensors[up].dtype is DataType.Q8_0
    assert same(art.tensors[up], quantize_tensor(up, pruned, "q8_0")[up])
    assert art.tensors["model.norm.weight"].dtype is DataType.F32


def test_pack_int8_writes_scales(home, tmp_path):
    src = export_safetensors(float_model(), tmp_path / "gen.safetensors")
    art = open_artifact(pack(src, out=tmp_path / "i.modelc", quantize="int8"))
    assert art.tensors["model.layers.0.mlp.up_proj.weight"].dtype is DataType.I8
    assert art.tensors["model.layers.0.mlp.up_proj.weight@scale"].shape == (64,)


def test_repack_an_artifact(home, tmp_path):
    from modelc.artifact import write_artifact
    from modelc.models.tiny import make_tiny_llama

    first = write_artifact(make_tiny_llama(0), tmp_path / "a.modelc")
    second = pack(first, out=tmp_path / "b.modelc", compress="zstd")
    a, b = open_artifact(first), open_artifact(second, verify=True)
    assert all(same(a.tensors[n], b.tensors[n]) for n in a.tensors)
    assert "zstd" in {e.compression for e in b.entries.values()}


def test_pack_errors(home, tmp_path):
    with pytest.raises(FormatError, match="no such file"):
        pack(tmp_path / "missing.safetensors")
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\0" * 64)
    with pytest.raises(ModelcError):
        pack(junk, out=tmp_path / "x.modelc")
    assert not (tmp_path / "x.modelc").exists() and not store.models_dir().exists()


@pytest.mark.parametrize(
    "rel", ["tiny-llama/hf", "tiny-llama/gguf/tiny-llama-Q4_0.gguf", "tiny-gpt2/gguf/tiny-gpt2-F32.gguf"]
)
def test_pack_fixture_roundtrip(home, shared_fixtures, tmp_path, rel):
    src = shared_fixtures / "models" / rel
    model = read_model(src)
    art = open_artifact(pack(src, out=tmp_path / "m.modelc"), verify=True)
    assert sorted(art.tensors) == sorted(model.tensors)
    assert all(same(art.tensors[n], model.tensors[n]) for n in model.tensors)
    assert art.architecture == model.architecture and art.tokenizer_json == model.tokenizer_json
    assert art.chat_template == model.chat_template and art.naming == model.naming


@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_int_quantized_embeddings_serve(tmp_path, kind) -> None:
    """--quantize int8|int4 --quantize-embeddings: the (tied) table keeps its per-row scales at lookup."""
    from modelc.artifact import write_artifact
    from modelc.engine.runner import Runner
    from modelc.models.tiny import make_tiny_llama

    src = tmp_path / "tiny.modelc"
    write_artifact(make_tiny_llama(0), src)
    base = Runner(open_artifact(src), num_kv_blocks=4).logits([5, 6, 7])  # (T, V)
    out = pack(src, out=tmp_path / f"tiny-{kind}.modelc", quantize=kind, quantize_embeddings=True)
    art = open_artifact(out)
    emb = [n for n in art.tensors if "embed" in n and not n.endswith("@scale")]
    assert emb and all(art.tensors[n].dtype.value.startswith("I") for n in emb)
    got = Runner(art, num_kv_blocks=4).logits([5, 6, 7])
    assert np.isfinite(got).all() and np.corrcoef(got.ravel(), base.ravel())[0, 1] > 0.9


def test_mlp_without_arch_is_packed_as_mlp(tmp_path) -> None:
    from safetensors.numpy import save_file

    from modelc.engine.infer import Inferencer

    rng = np.random.default_rng(0)
    tensors = {
        "0.weight": rng.standard_normal((16, 8)).astype(np.float32),
        "0.bias": np.zeros(16, np.float32),
        "2.weight": rng.standard_normal((4, 16)).astype(np.float32),
        "2.bias": np.zeros(4, np.float32),
    }
    save_file(tensors, str(tmp_path / "mlp.safetensors"))
    out = pack(tmp_path / "mlp.safetensors", out=tmp_path / "mlp.modelc")
    assert open_artifact(out).architecture == "mlp"
    got = Inferencer(out).infer({"input": [1.0] * 8})["output"]
    want = np.maximum(tensors["0.weight"] @ np.ones(8, np.float32), 0) @ tensors["2.weight"].T
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    save_file({"a.weight": tensors["0.weight"], "b": tensors["0.bias"]}, str(tmp_path / "other.safetensors"))
    assert open_artifact(pack(tmp_path / "other.safetensors", out=tmp_path / "o.modelc")).architecture != "mlp"


def test_pack_refuses_a_tokenizer_beyond_the_embedding_rows(home, tmp_path):
    """Tokenizer ids with no embedding row are refused with both numbers (llama.cpp's converter asserts
    the same); more embedding rows than tokens, as Qwen pads its embedding, is fine."""
    from modelc.models.tiny import make_tiny_llama
    from tests.server.tiny_model import byte_tokenizer_json

    tokenizer = byte_tokenizer_json()  # 256 byte tokens + the specials
    num_tokens = json_top_id(tokenizer) + 1
    small = make_tiny_llama(vocab_size=num_tokens - 10)
    small.tokenizer_json = tokenizer
    with pytest.raises(FormatError) as e:
        pack_model_from(small, tmp_path / "small.modelc")
    message = str(e.value)
    assert f"{num_tokens} tokens" in message and f"{num_tokens - 10} token embedding rows" in message
    assert not (tmp_path / "small.modelc").exists()  # nothing half-written
    padded = make_tiny_llama(vocab_size=num_tokens + 64)
    padded.tokenizer_json = tokenizer
    assert pack_model_from(padded, tmp_path / "padded.modelc").exists()


def json_top_id(tokenizer_json: str) -> int:
    import json

    data = json.loads(tokenizer_json)
    return max([*data["model"]["vocab"].values(), *(t["id"] for t in data.get("added_tokens", []))])


def pack_model_from(model: Model, out):
    from modelc.artifact import write_artifact

    src = out.with_suffix(".src.modelc")
    write_artifact(model, src)  # an artifact source (pack re-checks what it packs)
    return pack(src, out=out)
