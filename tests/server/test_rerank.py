"""/v1/rerank and /rerank on tiny random cross-encoders (BERT and XLM-R ...ForSequenceClassification,
packed into .modelc artifacts from their HF folders): the logits equal transformers' within 1e-4
(tests/fixtures/rerank/reference.json, written by tools/make_tiny_cross_encoders.py)."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from modelc.api.engines import EncoderEngine
from modelc.artifact.reader import open_artifact
from modelc.pack import pack

pytestmark = pytest.mark.anyio
FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "rerank"
REF = json.loads((FIXTURES / "reference.json").read_text())


@pytest.fixture(scope="module", params=["tiny_bert_ce", "tiny_xlmr_ce"])
def packed(request, tmp_path_factory) -> tuple[str, pathlib.Path]:
    out = tmp_path_factory.mktemp("rerank") / f"{request.param}.modelc"
    pack(FIXTURES / request.param, out=out, name=request.param)
    return request.param, out


async def test_scores_match_transformers(packed, make_client) -> None:
    name, path = packed
    c = make_client(EncoderEngine(open_artifact(path)))
    for route in ("/v1/rerank", "/rerank", "/reranking"):
        resp = await c.post(route, {"model": name, "query": REF["query"], "documents": REF["documents"]})
        assert resp.status_code == 200, await resp.get_data()
        body = await resp.get_json()
        ref = np.array(REF["logits"][name])
        got = {r["index"]: r for r in body["results"]}
        assert sorted(got) == list(range(len(ref)))
        np.testing.assert_allclose([got[i]["logit"] for i in range(len(ref))], ref, atol=1e-4)
        np.testing.assert_allclose(
            [got[i]["relevance_score"] for i in range(len(ref))], 1 / (1 + np.exp(-ref)), atol=1e-4
        )
        scores = [r["relevance_score"] for r in body["results"]]
        assert scores == sorted(scores, reverse=True)
        assert body["results"][0]["document"]["text"] == REF["documents"][body["results"][0]["index"]]
        assert body["usage"]["prompt_tokens"] > 5 * 10


async def test_top_n_objects_and_errors(packed, make_client) -> None:
    name, path = packed
    c = make_client(EncoderEngine(open_artifact(path)))
    docs = [{"text": d} for d in REF["documents"]]
    body = await (
        await c.post("/v1/rerank", {"query": REF["query"], "documents": docs, "top_n": 2, "return_documents": False})
    ).get_json()
    assert len(body["results"]) == 2 and "document" not in body["results"][0]
    best = int(np.argmax(REF["logits"][name]))
    assert body["results"][0]["index"] == best
    for bad, param in (
        ({"documents": ["x"]}, "query"),
        ({"query": "q", "documents": []}, "documents"),
        ({"query": "q", "documents": [3]}, "documents[0]"),
        ({"query": "q", "documents": ["x"], "top_n": 0}, "top_n"),
    ):
        resp = await c.post("/v1/rerank", bad)
        assert resp.status_code == 400 and (await resp.get_json())["error"]["param"] == param


async def test_not_a_reranker(make_client) -> None:
    resp = await make_client().post("/v1/rerank", {"query": "q", "documents": ["a"]})
    err = (await resp.get_json())["error"]
    assert resp.status_code == 400 and err["param"] == "model" and "cross-encoder" in err["message"]
