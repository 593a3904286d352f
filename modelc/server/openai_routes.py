"""OpenAI model listing and embeddings: GET /v1/models, /v1/models/{id}, POST /v1/embeddings.
(Chat and completions live in openai_chat.py and openai_completions.py.)"""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from modelc.errors import InvalidRequestError, NotFoundError
from modelc.server.embedding import embed_inputs, encode_vector, truncate
from modelc.server.handling import check_model, current_engine, get_state, read_json, record
from modelc.server.schema import get_int, get_str, parse_prompts

bp = Blueprint("openai", __name__)


def model_card(name: str, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": "modelc"}


@bp.get("/v1/models")
async def list_models() -> Any:
    state = get_state()
    engine = current_engine(state)
    names = [engine.name, *state.config.model_aliases]
    if state.models is not None:  # the daemon also serves every stored model (loaded on first use)
        names += [n for n in state.models.available() if n not in names]
    return {"object": "list", "data": [model_card(n, int(state.started_at)) for n in names]}


@bp.get("/v1/models/<path:model_id>")
async def get_model(model_id: str) -> Any:
    state = get_state()
    engine = current_engine(state)
    known = model_id == engine.name or model_id in state.config.model_aliases
    if not known and state.models is not None:
        known = model_id in state.models.available()
    if not known:
        raise NotFoundError(f"model {model_id!r} not found; this server serves {engine.name!r}", param="model")
    return model_card(model_id, int(state.started_at))


@bp.post("/v1/embeddings")
async def embeddings() -> Any:
    state = get_state()
    body = await read_json()
    engine = await state.engine_for(body.get("model"))
    model = check_model(state, engine, body)
    fmt = get_str(body, "encoding_format", "float")
    if fmt not in ("float", "base64"):
        raise InvalidRequestError("'encoding_format' must be float or base64", param="encoding_format")
    dims = get_int(body, "dimensions", None, lo=1)
    inputs = parse_prompts(body, "input")
    rec = record()
    rec.inference = True
    ids, num_tokens = embed_inputs(engine, inputs, "input")
    state.acquire_slot()
    try:
        vectors = truncate(await engine.embed(ids), dims)  # (S, C)
    finally:
        state.release_slot()
    rec.prompt_tokens = num_tokens
    state.metrics.prompt_tokens.inc(num_tokens)
    data = [{"object": "embedding", "index": i, "embedding": encode_vector(v, fmt)} for i, v in enumerate(vectors)]
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": num_tokens, "total_tokens": num_tokens},
    }
