"""POST /v1/rerank and /rerank (and llama.cpp's /reranking spellings), in the Jina / Cohere v1 shape,
and POST /v2/rerank in Cohere's v2 shape (cohere.ClientV2): query + documents -> results sorted by
relevance_score, for cross-encoder models (BERT/XLM-R ...ForSequenceClassification packed from HF).

relevance_score is the sigmoid of the model's logit (sentence-transformers' CrossEncoder default;
softmax of the last label for multi-label heads); the raw logit is returned too. The scoring runs
in a worker thread (EncoderEngine.rerank).

A (query, document) pair beyond the model's context (its max_seq_length) is a 400, as vLLM and
text-embeddings-inference answer, unless the request sends `truncate: true` (TEI's name for it); then
the pair is cut longest-first, as transformers' tokenizers do.
"""

from __future__ import annotations

import uuid
from typing import Any

from quart import Blueprint

from modelc.server import openapi_surfaces
from modelc.server.bounds import bounded_int
from modelc.server.context import char_budget, context_length, too_long
from modelc.server.handling import check_model, engine_for, get_state, new_id, read_json
from modelc.server.run import RequestRun
from modelc.server.schema import bad, get_bool, get_str
from modelc.server.served import ServedModel, reranking

OPENAPI_PATHS = openapi_surfaces.RERANK
bp = Blueprint("rerank", __name__)
MAX_DOCUMENTS = 1000


def parse_documents(body: dict[str, Any], *, strings_only: bool = False) -> list[str]:
    """`documents`: strings, or {'text': ...} objects too (Jina, Cohere v1) unless `strings_only` (Cohere v2)."""
    shape = "strings" if strings_only else "strings (or {'text': ...} objects)"
    docs = body.get("documents")
    if not isinstance(docs, list) or not docs:
        raise bad("documents", f"must be a non-empty list of {shape}")
    if len(docs) > MAX_DOCUMENTS:
        raise bad("documents", f"may hold at most {MAX_DOCUMENTS} documents")
    out = []
    for i, d in enumerate(docs):
        text = d.get("text") if isinstance(d, dict) and not strings_only else d
        if not isinstance(text, str):
            raise bad(f"documents[{i}]", "must be a string" if strings_only else "must be a string or {'text': string}")
        out.append(text)
    return out


def bound_texts(engine: ServedModel, query: str, docs: list[str], cut: bool) -> tuple[str, list[str]]:
    """Texts far longer than the context (by characters, modelc.server.context.char_budget) are a 400
    before the tokenizer runs, or cut to that many characters when truncating (the tokenizer then cuts
    the pair exactly, longest first)."""
    limit = context_length(engine)
    if limit is None or engine.tokenizer is None:
        return query, docs
    budget = char_budget(engine.tokenizer, limit)
    if not cut:
        for param, text in (("query", query), *((f"documents[{i}]", d) for i, d in enumerate(docs))):
            if len(text) > budget:
                raise too_long(param, f"{len(text)} characters", limit)
        return query, docs
    return query[:budget], [d[:budget] for d in docs]


async def score(state: Any, body: dict[str, Any], *, v2: bool) -> tuple[str, list[str], Any, list[int]]:
    """What both rerank shapes do: (model name, documents, Ranking, the top_n indices best first).
    Cohere's v2 cuts what is too long (max_tokens_per_doc, then the pair to the context) as Cohere does;
    the v1 shapes answer a 400 unless `truncate`."""
    engine = await engine_for(state, body.get("model"))
    model = check_model(state, engine, body)
    reranker = reranking(engine, param="model")
    query = get_str(body, "query")
    if query is None:
        raise bad("query", "is required")
    docs = parse_documents(body, strings_only=v2)
    top_n = bounded_int(body, "top_n", len(docs))
    cut = v2 or get_bool(body, "truncate", False)
    per_doc = bounded_int(body, "max_tokens_per_doc", None) if v2 else None
    query, texts = bound_texts(engine, query, docs, cut)
    run = RequestRun(state, engine)
    async with run.slot():
        ranking = await reranker.rerank(
            query, texts, truncate=cut, max_tokens_per_doc=per_doc, max_total_tokens=state.config.max_request_tokens
        )
    run.count_prompt(ranking.num_tokens)
    order = sorted(range(len(docs)), key=lambda i: -ranking.scores[i])[:top_n]
    return model, docs, ranking, order


@bp.post("/v1/rerank")
@bp.post("/rerank")
@bp.post("/v1/reranking")  # llama.cpp's other spellings
@bp.post("/reranking")
async def rerank() -> Any:
    state = get_state()
    body = await read_json()
    with_docs = get_bool(body, "return_documents", True)
    model, docs, ranking, order = await score(state, body, v2=False)
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


@bp.post("/v2/rerank")
async def rerank_v2() -> Any:
    """Cohere's v2 rerank (cohere.ClientV2.rerank): documents are strings, results are
    {index, relevance_score} best first, usage is in `meta`."""
    state = get_state()
    body = await read_json()
    _, _, ranking, order = await score(state, body, v2=True)
    return {
        "id": str(uuid.uuid4()),
        "results": [{"index": i, "relevance_score": float(ranking.scores[i])} for i in order],
        "meta": {
            "api_version": {"version": "2"},
            "billed_units": {"search_units": 1},
            "tokens": {"input_tokens": ranking.num_tokens, "output_tokens": 0},
        },
    }
