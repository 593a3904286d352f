"""Encoder models (BERT-family embeddings and cross-encoder rerankers) enforce their context length
(max_seq_length) instead of silently truncating: an input beyond it is a 400 unless the request asks
for truncation (`truncate`; Ollama's /api/embed and /api/embeddings truncate by default), and then
the cut keeps the closing special token, as the model's own tokenizer does."""

from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np
import pytest

from modelc.api.engines import EncoderEngine
from modelc.artifact.reader import open_artifact
from modelc.pack import pack
from tests.server.conftest import error_of

pytestmark = pytest.mark.anyio
FIXTURE = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "rerank" / "tiny_bert_ce"
LONG = "hello world " * 100  # ~200 tokens; the model takes 64
SHORT = "hello world"


@pytest.fixture(scope="module")
def artifact(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("enc") / "tiny_bert_ce.modelc"
    pack(FIXTURE, out=out, name="tiny_bert_ce")
    return out


@pytest.fixture(scope="module")
def embedding_artifact(tmp_path_factory) -> pathlib.Path:
    """The same tiny BERT as a plain encoder (BertModel): an embedding model (a cross-encoder is not one)."""
    folder = tmp_path_factory.mktemp("emb") / "tiny_bert"
    shutil.copytree(FIXTURE, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "architectures": ["BertModel"]}))
    out = folder.parent / "tiny_bert.modelc"
    pack(folder, out=out, name="tiny_bert")
    return out


@pytest.fixture
def encoder(embedding_artifact) -> EncoderEngine:
    return EncoderEngine(open_artifact(embedding_artifact))


@pytest.fixture
def reranker(artifact) -> EncoderEngine:
    return EncoderEngine(open_artifact(artifact))


async def test_openai_and_native_embeddings_refuse_inputs_beyond_the_context(encoder, make_client) -> None:
    c = make_client(encoder)
    limit = encoder.context_length
    assert limit == 64
    for path, body, param in (
        ("/v1/embeddings", {"input": LONG}, "input"),
        ("/v1/embeddings", {"input": [SHORT, LONG]}, "input"),
        ("/embeddings", {"input": LONG}, "input"),
        ("/embeddings", {"inputs": [LONG]}, "inputs"),
    ):
        err = await error_of(await c.post(path, body), 400, param)
        assert "context length is 64 tokens" in err["message"], err
    ok = await c.post("/v1/embeddings", {"input": [SHORT]})
    assert ok.status_code == 200


async def test_truncate_cuts_as_the_models_own_tokenizer(encoder, make_client) -> None:
    c = make_client(encoder)
    expected = encoder._embedder.embed([LONG])[0]  # the embedder's truncating tokenizer: [CLS] ... [SEP]
    ids = encoder.tokenizer.encode_truncated(LONG, 64)
    assert len(ids) == 64 and ids[-1] == encoder.tokenizer.encode(SHORT)[-1]  # the closing [SEP] is kept
    for path, body in (
        ("/v1/embeddings", {"input": LONG, "truncate": True}),
        ("/embeddings", {"input": LONG, "truncate": True}),
    ):
        resp = await c.post(path, body)
        data = await resp.get_json()
        assert resp.status_code == 200, data
        vec = data["data"][0]["embedding"] if "data" in data else data["embedding"]
        np.testing.assert_allclose(vec, expected, atol=1e-5)
    usage = (await (await c.post("/v1/embeddings", {"input": LONG, "truncate": True})).get_json())["usage"]
    assert usage["prompt_tokens"] == 64


async def test_ollama_embed_truncates_by_default(encoder, make_client) -> None:
    c = make_client(encoder)
    expected = encoder._embedder.embed([LONG])[0]
    resp = await c.post("/api/embed", {"model": "tiny_bert", "input": LONG})
    body = await resp.get_json()
    assert resp.status_code == 200 and body["prompt_eval_count"] == 64, body
    np.testing.assert_allclose(body["embeddings"][0], expected, atol=1e-5)
    resp = await c.post("/api/embed", {"model": "tiny_bert", "input": LONG, "truncate": False})
    assert resp.status_code == 400 and "context length" in (await resp.get_json())["error"]
    resp = await c.post("/api/embeddings", {"model": "tiny_bert", "prompt": LONG})
    assert resp.status_code == 200
    np.testing.assert_allclose((await resp.get_json())["embedding"], expected, atol=1e-5)


async def test_token_id_inputs_beyond_the_context_are_400(encoder, make_client) -> None:
    c = make_client(encoder)
    await error_of(await c.post("/v1/embeddings", {"input": [[5] * 65]}), 400, "input")
    resp = await c.post("/v1/embeddings", {"input": [[5] * 65], "truncate": True})
    assert resp.status_code == 200 and (await resp.get_json())["usage"]["prompt_tokens"] == 64


async def test_rerank_pairs_beyond_the_context_are_400_unless_truncated(reranker, make_client) -> None:
    encoder = reranker
    c = make_client(encoder)
    for route in ("/v1/rerank", "/rerank"):
        err = await error_of(await c.post(route, {"query": "hello", "documents": [SHORT, LONG]}), 400, "documents[1]")
        assert "context length of 64 tokens" in err["message"] and "truncate" in err["message"]
    err = await error_of(await c.post("/v1/rerank", {"query": LONG, "documents": [SHORT]}), 400, "documents[0]")
    huge = "hello " * 100_000  # refused by its length before the tokenizer runs
    await error_of(await c.post("/v1/rerank", {"query": "hello", "documents": [huge]}), 400, "documents[0]")
    resp = await c.post("/v1/rerank", {"query": "hello", "documents": [SHORT, LONG, huge], "truncate": True})
    body = await resp.get_json()
    assert resp.status_code == 200, body
    short = len(encoder._reranker.encode_pairs("hello", [SHORT])[0].ids)  # [CLS] hello [SEP] hello world [SEP]
    assert body["usage"]["prompt_tokens"] == short + 64 + 64  # the long pairs cut to 64
    got = {r["index"]: r["logit"] for r in body["results"]}
    direct = encoder._reranker.rank("hello", [SHORT, LONG], truncate=True)
    np.testing.assert_allclose([got[0], got[1]], direct.logits[:, -1], atol=1e-5)
    assert got[2] == pytest.approx(got[1], abs=1e-5)  # the same first 62 tokens of text
