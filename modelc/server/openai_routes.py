"""OpenAI model listing and embeddings: GET /v1/models, /v1/models/{id}, POST /v1/embeddings.
(Chat and completions live in openai_chat.py and openai_completions.py.)"""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from modelc.errors import InvalidRequestError, ModelcError, NotFoundError
from modelc.server.embedding import encode_vector, run_embeddings, truncate
from modelc.server.handling import check_model, current_engine, get_state, read_json
from modelc.server.schema import get_bool, get_int, get_str, parse_prompts

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


def model_known(state: Any, engine: Any, model_id: str) -> bool:
    """Whether generation would accept `model_id`: the served name or an alias, NAME:latest, and with a
    ModelManager every stored name, NAME:VERSION and base:adapter of a loaded adapter. Never a path."""
    names = {engine.name, *state.config.model_aliases}
    if model_id in names:
        return True
    base = model_id[: -len(":latest")] if model_id.endswith(":latest") else model_id
    if state.models is None:
        return base in names
    base, adapter = state.models.split_adapter(model_id)
    if base in names or base in state.models.available():
        found = True
    elif "/" in base or "\\" in base or base.endswith(".modelc") or len(base.encode()) > 255:
        return False
    else:
        from modelc import store

        try:
            store.resolve(base)  # NAME:VERSION
            found = True
        except (ModelcError, OSError):
            found = False
    if found and adapter is not None:
        entry = state.models.find(base)
        from modelc.daemon.loaded import engine_adapters

        found = entry is not None and (adapter in entry.adapters or adapter in engine_adapters(entry.engine))
    return found


@bp.get("/v1/models/<path:model_id>")
async def get_model(model_id: str) -> Any:
    state = get_state()
    engine = current_engine(state)
    if not model_known(state, engine, model_id):
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
    # OpenAI answers 400 for an input beyond the context; `truncate: true` (as Ollama's) cuts it instead.
    cut = get_bool(body, "truncate", False)
    vectors, num_tokens = await run_embeddings(state, engine, inputs, "input", truncate=cut)
    vectors = truncate(vectors, dims)  # (S, C)
    data = [{"object": "embedding", "index": i, "embedding": encode_vector(v, fmt)} for i, v in enumerate(vectors)]
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": num_tokens, "total_tokens": num_tokens},
    }
