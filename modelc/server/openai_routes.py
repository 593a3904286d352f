"""OpenAI model listing and embeddings: GET /v1/models, /v1/models/{id}, POST /v1/embeddings (and the
same paths without /v1, as llama.cpp's server and vLLM answer them; /embeddings is shared with the
native API, native_routes.py). Chat and completions live in openai_chat.py and openai_completions.py."""

from __future__ import annotations

from typing import Any

import anyio
from quart import Blueprint

from modelc import store
from modelc.artifact.reader import read_header_only
from modelc.capabilities import capabilities, source_capabilities
from modelc.errors import InvalidRequestError, ModelcError, NotFoundError
from modelc.server.bounds import bounded_int
from modelc.server.embedding import encode_vector, run_embeddings, truncate
from modelc.server.handling import check_model, current_engine, engine_for, get_state, json_off_loop, read_json
from modelc.server.manager.loaded import engine_adapters
from modelc.server.schema import get_bool, get_str, parse_prompts
from modelc.server.served import RERANK, ServedModel

bp = Blueprint("openai", __name__)


def model_card(name: str, created: int, capabilities: list[str] | None = None,
               context_length: int | None = None) -> dict[str, Any]:  # fmt: skip
    card: dict[str, Any] = {"id": name, "object": "model", "created": created, "owned_by": "modelc"}
    if capabilities is not None:
        card["capabilities"] = capabilities  # modelc's extension (modelc.capabilities)
    if context_length:
        card["context_length"] = context_length  # a loaded model's: tokens one sequence may hold (run --ctx-size)
    return card


def engine_capabilities(engine: ServedModel) -> list[str]:
    """modelc.capabilities of a served engine, from its source (or the engine's own attributes)."""
    src = engine.source
    if src is not None:
        return source_capabilities(src)
    template = engine.chat_template
    caps = capabilities(engine.architecture, None, template.source if template is not None else None)
    if RERANK in engine.serves and "embedding" in caps:  # a cross-encoder without a source to read
        caps[caps.index("embedding")] = "rerank"
    return caps


def _stored_capabilities(names: list[str]) -> dict[str, list[str]]:
    """Capabilities of stored models from their headers only (run in a worker thread)."""
    out: dict[str, list[str]] = {}
    for n in names:
        try:
            out[n] = source_capabilities(read_header_only(store.lookup(n)))
        except (ModelcError, OSError):
            continue
    return out


async def model_capabilities(state: Any, engine: ServedModel, model_id: str) -> list[str] | None:
    """The capabilities of the model `model_id` names (model_known said it exists): the served engine's,
    a loaded model's, or a stored one's from its header. An adapter name has its base model's."""
    names = {engine.name, *state.config.model_aliases}
    base = model_id[: -len(":latest")] if model_id.endswith(":latest") else model_id
    if state.models is None:
        return engine_capabilities(engine) if base in names else None
    base, _ = state.models.split_adapter(model_id)
    if base in names:
        return engine_capabilities(engine)
    entry = state.models.find(base)
    if entry is not None and entry.engine is not None:
        return engine_capabilities(entry.engine)
    return (await anyio.to_thread.run_sync(_stored_capabilities, [base])).get(base)


@bp.get("/v1/models")
@bp.get("/models")  # llama.cpp's server and vLLM answer the OpenAI paths without /v1 too
async def list_models() -> Any:
    state = get_state()
    engine = current_engine(state)
    names = [engine.name, *state.config.model_aliases]
    caps = {n: engine_capabilities(engine) for n in names}
    ctx = dict.fromkeys(names, engine.context_length)
    if state.models is not None:  # the daemon also serves every stored model (loaded on first use)
        entries = {e.name: e for e in state.models.loaded()}
        stored = [n for n in state.models.available() if n not in names]
        caps.update({n: engine_capabilities(entries[n].engine) for n in stored if n in entries})
        ctx.update({n: entries[n].engine.context_length for n in stored if n in entries and entries[n].engine})
        caps.update(await anyio.to_thread.run_sync(_stored_capabilities, [n for n in stored if n not in caps]))
        names += stored
    created = int(state.started_at)
    return {"object": "list", "data": [model_card(n, created, caps.get(n), ctx.get(n)) for n in names]}


def model_known(state: Any, engine: ServedModel, model_id: str) -> bool:
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
        try:
            store.lookup(base)  # NAME:VERSION, inside the store only (never a file in the working directory)
            found = True
        except (ModelcError, OSError):
            found = False
    if found and adapter is not None:
        entry = state.models.find(base)

        found = entry is not None and (adapter in entry.adapters or adapter in engine_adapters(entry.engine))
    return found


@bp.get("/v1/models/<path:model_id>")
@bp.get("/models/<path:model_id>")
async def get_model(model_id: str) -> Any:
    state = get_state()
    engine = current_engine(state)
    if not model_known(state, engine, model_id):
        raise NotFoundError(f"model {model_id!r} not found; this server serves {engine.name!r}", param="model")
    return model_card(model_id, int(state.started_at), await model_capabilities(state, engine, model_id))


@bp.post("/v1/embeddings")
async def embeddings() -> Any:
    return await openai_embeddings(await read_json())


async def openai_embeddings(body: dict[str, Any]) -> Any:
    """OpenAI's embeddings: /v1/embeddings, and /embeddings when the body is OpenAI's (native_routes)."""
    state = get_state()
    engine = await engine_for(state, body.get("model"))
    model = check_model(state, engine, body)
    fmt = get_str(body, "encoding_format", "float")
    if fmt not in ("float", "base64"):
        raise InvalidRequestError("'encoding_format' must be float or base64", param="encoding_format")
    dims = bounded_int(body, "dimensions", None)
    inputs = parse_prompts(body, "input")
    # OpenAI answers 400 for an input beyond the context; `truncate: true` (as Ollama's) cuts it instead.
    cut = get_bool(body, "truncate", False)
    vectors, num_tokens = await run_embeddings(state, engine, inputs, "input", truncate=cut)

    def build() -> dict[str, Any]:
        vs = truncate(vectors, dims)  # (S, C)
        data = [{"object": "embedding", "index": i, "embedding": encode_vector(v, fmt)} for i, v in enumerate(vs)]
        usage = {"prompt_tokens": num_tokens, "total_tokens": num_tokens}
        return {"object": "list", "data": data, "model": model, "usage": usage}

    return await json_off_loop(build)  # megabytes of floats: serialized off the loop
