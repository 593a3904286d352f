"""POST /v1/rerank and /rerank (and llama.cpp's /reranking spellings), in the Jina / Cohere shape:
query + documents -> results sorted by relevance_score, for cross-encoder models (BERT/XLM-R
...ForSequenceClassification packed from HF).

relevance_score is the sigmoid of the model's logit (sentence-transformers' CrossEncoder default;
softmax of the last label for multi-label heads); the raw logit is returned too. The scoring runs
in a worker thread (EncoderEngine.rerank).
"""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from modelc.errors import InvalidRequestError
from modelc.server import openapi_surfaces
from modelc.server.handling import check_model, get_state, new_id, read_json, record
from modelc.server.schema import bad, get_bool, get_int, get_str

OPENAPI_PATHS = openapi_surfaces.RERANK
bp = Blueprint("rerank", __name__)
MAX_DOCUMENTS = 1000


def parse_documents(body: dict[str, Any]) -> list[str]:
    docs = body.get("documents")
    if not isinstance(docs, list) or not docs:
        raise bad("documents", "must be a non-empty list of strings (or {'text': ...} objects)")
    if len(docs) > MAX_DOCUMENTS:
        raise bad("documents", f"may hold at most {MAX_DOCUMENTS} documents")
    out = []
    for i, d in enumerate(docs):
        text = d.get("text") if isinstance(d, dict) else d
        if not isinstance(text, str):
            raise bad(f"documents[{i}]", "must be a string or {'text': string}")
        out.append(text)
    return out


@bp.post("/v1/rerank")
@bp.post("/rerank")
@bp.post("/v1/reranking")  # llama.cpp's other spellings
@bp.post("/reranking")
async def rerank() -> Any:
    state = get_state()
    body = await read_json()
    engine = await state.engine_for(body.get("model"))
    model = check_model(state, engine, body)
    if not getattr(engine, "can_rerank", False):
        raise InvalidRequestError(
            f"model {engine.name!r} is not a reranker: /v1/rerank needs a cross-encoder "
            "(a BERT/XLM-R ...ForSequenceClassification model)",
            param="model",
        )
    query = get_str(body, "query")
    if query is None:
        raise bad("query", "is required")
    docs = parse_documents(body)
    top_n = get_int(body, "top_n", len(docs), lo=1)
    with_docs = get_bool(body, "return_documents", True)
    rec = record()
    rec.inference = True
    state.acquire_slot()
    try:
        ranking = await engine.rerank(query, docs)
    finally:
        state.release_slot()
    rec.prompt_tokens = ranking.num_tokens
    state.metrics.prompt_tokens.inc(ranking.num_tokens)
    order = sorted(range(len(docs)), key=lambda i: -ranking.scores[i])[:top_n]
    results = []
    for i in order:
        item: dict[str, Any] = {
            "index": i,
            "relevance_score": float(ranking.scores[i]),
            "logit": float(ranking.logits[i, -1]),
        }
        if with_docs:
            item["document"] = {"text": docs[i]}
        results.append(item)
    return {
        "id": new_id("rerank"),
        "object": "list",
        "model": model,
        "results": results,
        "usage": {"prompt_tokens": ranking.num_tokens, "total_tokens": ranking.num_tokens},
    }
