"""The native (seed spec) API: /health /info /props /v1/system /api/version /metrics /infer /chat
/chat/stream /complete /embeddings /tokenize /detokenize /lora/load /lora/unload. /embeddings also
answers OpenAI's embeddings request (is_openai_embeddings), as /v1/embeddings, and llama-server's (a body
with `content`), as /embedding.

Shapes follow ../shared/SEED-SPEC.md's HTTP API section; generation reuses the OpenAI machinery
with the seed defaults (temperature 0 = greedy, top_p/min_p 0 = off).
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import AsyncGenerator
from typing import Any

from quart import Blueprint, Response

from modelc.errors import InvalidRequestError, ModelcError
from modelc.models import residency
from modelc.request import Finished, SamplingParams
from modelc.server.chat_plan import ChatRequest, plan_chat
from modelc.server.context import context_length, encode_bounded, prompt_limit
from modelc.server.embedding import encode_vector, run_embeddings
from modelc.server.errors import error_body
from modelc.server.generation import Job
from modelc.server.guard import control_route
from modelc.server.handling import (
    current_engine,
    get_state,
    json_off_loop,
    offload,
    precompile,
    read_json,
    require_generation,
    require_tokenizer,
)
from modelc.server.llama_embedding import llama_embeddings
from modelc.server.manager.lookup import hidden_path, resolve_adapter
from modelc.server.openai_routes import openai_embeddings
from modelc.server.prompt import encode_prompt
from modelc.server.run import RequestRun
from modelc.server.schema import (
    check_token_ids,
    get_bool,
    get_float,
    get_str,
    parse_constraint,
    parse_messages,
    parse_sampling,
    token_ids_of,
    with_constraint,
)
from modelc.server.served import ModelSource, ServedModel, inferring
from modelc.server.sse import sse_event
from modelc.server.state import ServerState
from modelc.version import __version__, git_sha

bp = Blueprint("native", __name__)


def model_source(engine: ServedModel) -> ModelSource | None:
    return engine.source


def model_summary(engine: ServedModel) -> dict[str, Any]:
    src = model_source(engine)
    return {
        "name": engine.name,
        "architecture": engine.architecture,
        "total_params": src.num_params if src is not None else 0,
        "total_bytes": src.total_bytes if src is not None else 0,
        "tensors": sorted(src.tensors) if src is not None else [],
    }


@bp.get("/health")
async def health() -> Any:
    state = get_state()
    if state.engine is None:
        status = "error" if state.load_error else "loading"
        body = {"status": status, "model": None, "architecture": None, "error": state.load_error}
        return body, 503, {"Retry-After": str(state.config.retry_after_s)}
    from modelc.engine.warm import compiling  # "compiling": served on the reference kernels meanwhile

    kernels = "compiling" if compiling() else "ready"
    return {"status": "ok", "model": state.engine.name, "architecture": state.engine.architecture, "kernels": kernels}


@bp.get("/info")
async def info() -> Any:
    return model_summary(current_engine(get_state()))


def default_generation(state: ServerState, engine: ServedModel | None = None) -> dict[str, Any]:
    d = state.config.defaults
    sched = engine.config.scheduler if engine is not None and engine.config is not None else None
    gamma = sched.spec_gamma if sched is not None and sched.speculative else 0
    return {
        "max_tokens": d.max_tokens if d.max_tokens is not None else 128,
        "temperature": d.temperature if d.temperature is not None else 0.0,
        "top_p": d.top_p if d.top_p is not None else 0.0,
        "min_p": d.min_p if d.min_p is not None else 0.0,
        "repetition_penalty": d.repetition_penalty if d.repetition_penalty is not None else 1.0,
        "presence_penalty": d.presence_penalty if d.presence_penalty is not None else 0.0,
        "frequency_penalty": d.frequency_penalty if d.frequency_penalty is not None else 0.0,
        "gamma": gamma,
        "speculative": sched.speculative if sched is not None else None,
    }


@bp.get("/props")
async def props() -> Any:
    state = get_state()
    engine = current_engine(state)
    summary = model_summary(engine)
    template = engine.chat_template
    return {
        "model": engine.name,
        "architecture": engine.architecture,
        "total_params": summary["total_params"],
        "total_bytes": summary["total_bytes"],
        "chat_template": template.source if template is not None else None,
        "default_generation": default_generation(state, engine),
        "kv_cache_dtype": engine.config.cache.kv_dtype if engine.config is not None else None,
        "n_ctx": engine.context_length,  # tokens one sequence may hold (run --ctx-size; llama.cpp's name)
        "weights": weights_mode(engine),
    }


def weights_mode(engine: ServedModel) -> dict[str, Any] | None:
    """Where the served weights live (models/residency.py): {"mode": "resident" | "streamed", "reason", ...};
    None for an engine without generation settings (encoders, MLP/ONNX)."""
    plan = residency.plan_for(engine.source) if engine.source is not None else None
    if plan is not None:
        return plan.describe()
    return None if engine.config is None else {"mode": engine.config.weights}


def memory_total_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


@bp.get("/v1/system")
async def system() -> Any:
    summary = model_summary(current_engine(get_state()))
    return {
        "model": summary["name"],
        "architecture": summary["architecture"],
        "total_params": summary["total_params"],
        "total_bytes": summary["total_bytes"],
        "cpu_cores": os.cpu_count(),
        "os": platform.system().lower(),
        "cpu_arch": platform.machine(),
        "pointer_width": 64 if platform.architecture()[0] == "64bit" else 32,
        "metal_available": False,
        "memory_total_bytes": memory_total_bytes(),
    }


@bp.get("/api/version")
async def api_version() -> Any:
    return {"version": __version__, "git_sha": git_sha()}


@bp.get("/metrics")
async def metrics() -> Any:
    state = get_state()
    return Response(state.metrics.exposition(), content_type="text/plain; version=0.0.4; charset=utf-8")


@bp.post("/infer")
async def infer() -> Any:
    state = get_state()
    engine = current_engine(state)
    body = await read_json()
    model = inferring(engine)
    if "input" not in body and "inputs" not in body:
        raise InvalidRequestError("/infer needs 'input' (one example) or 'inputs' (a batch)", param="input")
    async with RequestRun(state, engine).slot():
        return await model.infer(body)


def native_sampling(state: ServerState, engine: ServedModel, body: dict[str, Any]) -> tuple[SamplingParams, Any]:
    """The seed spec's sampling fields (its defaults) and the constraint, not yet joined."""
    require_generation(engine)
    params = parse_sampling(
        body, state.config.defaults, vocab_size=engine.tokenizer.vocab_size if engine.tokenizer else None, native=True
    )
    return params, parse_constraint(body)


def native_params(state: ServerState, engine: ServedModel, body: dict[str, Any]) -> SamplingParams:
    params, constraint = native_sampling(state, engine, body)
    precompile(engine, constraint)
    return with_constraint(params, constraint)


def chat_request(state: ServerState, engine: ServedModel, body: dict[str, Any]) -> tuple[SamplingParams, list[int]]:
    """Sampling parameters and prompt ids of /chat and /chat/stream (run in a worker thread): the body as the
    one chat request every surface makes (chat_plan.py), without tools; the answer is the raw text."""
    params, constraint = native_sampling(state, engine, body)
    require_tokenizer(engine)
    req = ChatRequest(
        engine.name, parse_messages(body), params, constraint, limit=prompt_limit(engine, body), reasoning=False
    )
    plan = plan_chat(engine, req)
    return plan.jobs[0].params, list(plan.prompt_token_ids)


def complete_request(state: ServerState, engine: ServedModel, body: dict[str, Any]) -> tuple[Any, list[int]]:
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        raise InvalidRequestError("'prompt' must be a string", param="prompt")
    params = native_params(state, engine, body)
    return params, encode_prompt(require_tokenizer(engine), prompt, None, limit=prompt_limit(engine, body))


async def run_one(state: ServerState, engine: ServedModel, ids: list[int], params: Any) -> str:
    results = await RequestRun(state, engine, [Job(tuple(ids), params)]).collect()
    return results[0].text


@bp.post("/chat")
async def chat() -> Any:
    state = get_state()
    engine = current_engine(state)
    body = await read_json()
    params, ids = await offload(chat_request, state, engine, body)
    text = await run_one(state, engine, ids, params)
    return {"message": {"role": "assistant", "content": text}}


@bp.post("/chat/stream")
async def chat_stream() -> Any:
    state = get_state()
    engine = current_engine(state)
    body = await read_json()
    params, ids = await offload(chat_request, state, engine, body)
    run = RequestRun(state, engine, [Job(tuple(ids), params)])
    await run.start()
    return run.respond(native_sse(run), native_error_frames)


async def native_sse(run: RequestRun) -> AsyncGenerator[bytes, None]:
    async for _, ev in run.events():
        if isinstance(ev, Finished):
            run.account()
            yield sse_event({"delta": "", "done": True, "finish_reason": ev.finish_reason})
        elif ev.text:
            yield sse_event({"delta": ev.text, "done": False})


def native_error_frames(e: ModelcError) -> tuple[bytes, ...]:
    return (sse_event({**error_body(e), "done": True}),)


@bp.post("/complete")
async def complete() -> Any:
    state = get_state()
    engine = current_engine(state)
    body = await read_json()
    params, ids = await offload(complete_request, state, engine, body)
    return {"completion": await run_one(state, engine, ids, params)}


def single_or_batch(body: dict[str, Any], kind: type) -> tuple[list[Any], bool]:
    """The seed shapes: {"input": x} (single) or {"inputs": [x, ...]} (batch)."""
    if "inputs" in body:
        items = body["inputs"]
        if not isinstance(items, list) or not items or not all(isinstance(x, kind) for x in items):
            raise InvalidRequestError(f"'inputs' must be a non-empty list of {kind.__name__}s", param="inputs")
        return items, True
    item = body.get("input")
    if not isinstance(item, kind):
        raise InvalidRequestError(f"'input' must be a {kind.__name__} (or send 'inputs': [...])", param="input")
    return [item], False


# The fields only OpenAI's embeddings request has: a body with one of them (every OpenAI client sends
# `model`, which OpenAI requires) or a list `input` is answered in OpenAI's shape, as /v1/embeddings.
OPENAI_EMBEDDING_FIELDS = ("model", "encoding_format", "dimensions", "user")


def is_openai_embeddings(body: dict[str, Any]) -> bool:
    return any(body.get(k) is not None for k in OPENAI_EMBEDDING_FIELDS) or isinstance(body.get("input"), list)


@bp.post("/embeddings")
async def native_embeddings() -> Any:
    """The seed spec's {"input"} / {"inputs"} embeddings, OpenAI's (the /v1 path without /v1), or llama-server's
    (a body with `content` and no `input`: llama_embedding)."""
    state = get_state()
    body = await read_json()
    if "content" in body and "input" not in body and "inputs" not in body:
        return await llama_embeddings(body, "content")
    if is_openai_embeddings(body):
        return await openai_embeddings(body)
    engine = current_engine(state)
    texts, batch = single_or_batch(body, str)
    truncate = get_bool(body, "truncate", False)
    vectors, _ = await run_embeddings(state, engine, texts, "inputs" if batch else "input", truncate=truncate)
    if not batch:
        return {"embedding": encode_vector(vectors[0], "float"), "model": engine.name}
    return await json_off_loop(
        lambda: {
            "embeddings": [{"embedding": encode_vector(v, "float"), "index": i} for i, v in enumerate(vectors)],
            "model": engine.name,
        }
    )


@bp.post("/tokenize")
async def tokenize() -> Any:
    """The seed's {"input"} / {"inputs"} (special tokens added by default), or llama.cpp's {"content"}
    (add_special false by default; with_pieces: each id with its text, or its bytes where they are not UTF-8)."""
    engine = current_engine(get_state())
    body = await read_json()
    llama = "content" in body and "input" not in body and "inputs" not in body
    if llama:
        if not isinstance(body["content"], str):
            raise InvalidRequestError("'content' must be a string", param="content")
        texts, batch = [body["content"]], False
    else:
        texts, batch = single_or_batch(body, str)
    add_special = body.get("add_special", not llama)
    if not isinstance(add_special, bool):
        raise InvalidRequestError("'add_special' must be a boolean", param="add_special")
    with_pieces = body.get("with_pieces", False)
    if not isinstance(with_pieces, bool):
        raise InvalidRequestError("'with_pieces' must be a boolean", param="with_pieces")
    tok = require_tokenizer(engine)
    limit = context_length(engine)
    param = "content" if llama else "input"

    def encode_all() -> list[list[int]]:
        # Bounded like prompts: a text that could never be a prompt is not tokenized either.
        return [encode_bounded(tok, t, add_special=add_special, limit=limit, param=param) for t in texts]

    lists = await offload(encode_all)
    count = sum(len(t) for t in lists)
    if batch:
        return {"tokens_batch": lists, "count": count}
    if with_pieces:
        return {"tokens": [{"id": t, "piece": _piece(tok.token_bytes(t))} for t in lists[0]], "count": count}
    return {"tokens": lists[0], "count": count}


def _piece(raw: bytes) -> str | list[int]:
    """A token's text as llama-server's with_pieces gives it: a string, or its bytes where they are not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return list(raw)


@bp.post("/detokenize")
async def detokenize() -> Any:
    """Token ids -> text, as "text" (the seed) and "content" (llama.cpp)."""
    engine = current_engine(get_state())
    body = await read_json()
    tokens = token_ids_of(body.get("tokens"))
    if tokens is None:
        raise InvalidRequestError("'tokens' must be a list of token ids", param="tokens")
    tok = require_tokenizer(engine)
    check_token_ids(tokens, "tokens", tok.vocab_size)
    text = await offload(tok.decode, tokens)
    return {"text": text, "content": text}


@bp.post("/lora/load")
@control_route
async def lora_load() -> Any:
    state = get_state()
    engine = current_engine(state)
    body = await read_json()
    path = get_str(body, "path")
    if not path:
        raise InvalidRequestError("'path' (a LoRA adapter .safetensors file) is required", param="path")
    alpha = get_float(body, "alpha", 1.0)
    name = get_str(body, "name") or os.path.splitext(os.path.basename(path.rstrip("/")))[0]

    shown, path = path, str(resolve_adapter(path, state.config.adapters_dir))  # only inside --adapters-dir
    global_ = body.get("global", True)
    if not isinstance(global_, bool):
        raise InvalidRequestError("'global' must be a boolean", param="global")
    started = time.monotonic()
    with hidden_path(path, name):
        out = await engine.load_adapter(name, path, alpha=alpha, global_=global_)
    info = out if isinstance(out, dict) else {}
    return {
        "name": name,
        "applied": int(info.get("applied", 0)),
        "skipped": int(info.get("skipped", 0)),
        "global": global_,
        "message": f"LoRA adapter {name!r} loaded from {shown} (alpha={alpha}) in {time.monotonic() - started:.3f}s",
    }


@bp.post("/lora/unload")
@control_route
async def lora_unload() -> Any:
    engine = current_engine(get_state())
    body = await read_json() if await _has_body() else {}
    name = get_str(body, "name")
    if name is None:
        loaded = list(engine.adapters)
        if len(loaded) != 1:
            raise InvalidRequestError(
                f"name the adapter to unload ('name'); loaded: {', '.join(loaded) if loaded else 'none'}", param="name"
            )
        name = loaded[0]
    await engine.unload_adapter(name)
    return {"message": f"LoRA adapter {name!r} unloaded; base model restored"}


async def _has_body() -> bool:
    from quart import request

    return bool(await request.get_data())
