"""POST /embedding: llama-server's non-OpenAI embeddings (llama-server answers its /embeddings the same way;
modelc's /embeddings does when the body sends llama.cpp's `content`: native_routes).

`content` (or `input`) is a string, token ids, token ids mixed with strings (one input: the first text with
the model's special tokens, as llama-server tokenizes it), or a list of those. The answer is llama-server's
`[{"index": i, "embedding": [[...]]}]`: a list of vectors per input. llama-server gives one vector per token
only under pooling "none"; every modelc embedding model pools (a causal LM: mean over the tokens; an encoder:
its configured pooling), so each input has its one pooled vector. `embd_normalize` is llama.cpp's
common_embd_normalize. The vectors come from the same path as /v1/embeddings (server/embedding.run_embeddings).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from quart import Blueprint

from modelc.server.completion_routes import prompt_pieces
from modelc.server.embedding import encode_vector, run_embeddings
from modelc.server.handling import check_model, engine_for, get_state, json_off_loop, read_json
from modelc.server.openapi import GEN_ERRORS, LLAMA_CONTENT, LLAMA_EMBED_REQ, LLAMA_EMBED_RESP, _op
from modelc.server.schema import bad, get_bool
from modelc.server.served import EMBED, check_serves

bp = Blueprint("llama_embedding", __name__)
OPENAPI_PATHS = {
    "/embedding": {
        "post": _op(
            "llama-server's non-OpenAI embeddings: [{index, embedding: [[...]]}], one pooled vector per input",
            LLAMA_EMBED_RESP,
            {
                **LLAMA_EMBED_REQ,
                "properties": {
                    **LLAMA_EMBED_REQ["properties"],
                    "input": {**LLAMA_CONTENT, "description": "as content; wins over it"},
                },
                "required": [],
                "anyOf": [{"required": ["content"]}, {"required": ["input"]}],
            },
            errors=GEN_ERRORS,
        )
    }
}

EMBD_NORMALIZE = 2  # llama-server's default: Euclidean (L2)
MAX_ABS_RANGE = 32760.0  # embd_normalize 0 scales the largest |x| to this (llama.cpp: "an int16 range")


def embd_normalize(vectors: np.ndarray, p: int) -> np.ndarray:
    """llama.cpp's common_embd_normalize on each row: p = -1 none, 0 max-absolute (largest |x| -> 32760),
    1 taxicab, 2 Euclidean, > 2 the p-norm; a zero vector stays zero.

    NOTE: modelc's engines hand back pooled vectors already L2-normalized (as /v1/embeddings answers them), and
    every norm here is scale-invariant (v / |v| = (c v) / |c v| for c > 0), so applying it to that unit vector
    gives exactly what llama-server gives from the raw pooled one. For p = -1 the route asks the engine for the
    pooled vector before its normalization (embed(..., normalize=False))."""
    v = np.asarray(vectors, dtype=np.float64)  # (S, C)
    a = np.abs(v)
    if p == -1:
        scale = np.ones((v.shape[0], 1))
    elif p == 0:
        scale = a.max(axis=1, keepdims=True) / MAX_ABS_RANGE
    elif p == 2:
        scale = np.sqrt((v * v).sum(axis=1, keepdims=True))
    else:
        scale = (a**p).sum(axis=1, keepdims=True) ** (1.0 / p)
    safe = np.where(scale > 0, scale, 1.0)
    return np.where(scale > 0, v / safe, 0.0).astype(np.float32)  # (S, C)


def parse_normalize(body: dict[str, Any]) -> int:
    p = body.get("embd_normalize", EMBD_NORMALIZE)
    if isinstance(p, float) and p.is_integer():
        p = int(p)
    if isinstance(p, bool) or not isinstance(p, int) or p < -1 or p > 64:
        raise bad("embd_normalize", "must be an integer: -1 none, 0 max absolute, 1 taxicab, 2 Euclidean, 3..64 p-norm")
    return p


async def llama_embeddings(body: dict[str, Any], param: str) -> Any:
    """The llama-server answer for the inputs in body[param] ("content", or "input" on /embedding)."""
    state = get_state()
    engine = await engine_for(state, body.get("model"))
    check_model(state, engine, body)
    check_serves(engine, EMBED, param)  # a model that cannot embed: a 400 naming what it serves
    pieces = prompt_pieces(body.get(param), param)
    p = parse_normalize(body)
    inputs: list[Any] = [x[0] if len(x) == 1 and isinstance(x[0], str) else x for x in pieces]
    cut = get_bool(body, "truncate", False)  # modelc's: cut an input beyond the context instead of a 400
    vectors, _ = await run_embeddings(state, engine, inputs, param, truncate=cut, normalize=p != -1)  # (S, C)

    def build() -> list[dict[str, Any]]:
        vs = embd_normalize(vectors, p)  # (S, C)
        return [{"index": i, "embedding": [encode_vector(v, "float")]} for i, v in enumerate(vs)]

    return await json_off_loop(build)


@bp.post("/embedding")
async def embedding() -> Any:
    """llama-server's non-OpenAI embeddings: [{index, embedding: [[...]]}] per input"""
    body = await read_json()
    return await llama_embeddings(body, "input" if "input" in body else "content")
