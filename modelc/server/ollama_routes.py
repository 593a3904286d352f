"""Ollama-shaped management API: /api/tags /api/ps /api/show /api/pull /api/delete /api/copy, and
modelc's own /api/load /api/unload /api/lora/load /api/lora/unload /api/shutdown.

Routes validate and call modelc.store, modelc.registry and the ModelManager (state.models); the
shapes live in ollama_shapes.py. Generation (/api/generate, /api/chat, /api/embed) is ollama_chat.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
from quart import Blueprint, Response

from modelc import registry, store
from modelc.artifact.reader import read_header_only
from modelc.capabilities import source_capabilities
from modelc.errors import ForbiddenError, InvalidRequestError, ModelcError, NotFoundError
from modelc.pull.ref import looks_remote
from modelc.server import ollama_shapes as shapes
from modelc.server import openapi_ollama
from modelc.server.guard import control_route
from modelc.server.handling import check_model, current_engine, get_state, managed_engine, read_json
from modelc.server.manager.load_options import engine_config_for
from modelc.server.manager.loaded import model_bytes, model_source
from modelc.server.manager.lookup import hidden_path, resolve_adapter, resolve_model
from modelc.server.manager.models import parse_keep_alive
from modelc.server.openai_routes import engine_capabilities
from modelc.server.pull_stream import remote_pull
from modelc.server.served import ModelSource, ServedModel
from modelc.server.state import ServerState
from modelc.store import dtype_summary

bp = Blueprint("ollama", __name__)
OPENAPI_PATHS = openapi_ollama.ROUTE_PATHS
NDJSON = "application/x-ndjson"


def ndjson(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj, ensure_ascii=False) + "\n").encode()


def model_name(body: dict[str, Any], required: bool = True) -> str:
    """`model` (or Ollama's older `name`)."""
    name = body.get("model", body.get("name"))
    if name is None or name == "":
        if required:
            raise InvalidRequestError("'model' is required", param="model")
        return ""
    if not isinstance(name, str):
        raise InvalidRequestError("'model' must be a string", param="model")
    return name


async def model_for(state: ServerState, name: str, keep_alive: Any = None) -> ServedModel:
    """The engine (a ModelView when a manager runs) for `name`; "" = the default model."""
    keep = parse_keep_alive(keep_alive)
    if state.models is None or not name:
        engine = current_engine(state)
        check_model(state, engine, {"model": name})
        return engine
    return await managed_engine(state, name, keep)


def _default_row(state: ServerState) -> dict[str, Any] | None:
    """The default model when it is not a store file (a path, the bundled model, an in-memory model)."""
    entry = state.models.default if state.models is not None else None
    engine = state.engine
    if engine is None:
        return None

    src = model_source(engine)
    path = entry.path if entry is not None else None
    num_params = src.num_params if src is not None else 0
    name = entry.name if entry is not None else engine.name
    return {
        "name": name,
        "model": name,
        "modified_at": shapes.iso_time(path.stat().st_mtime if path else (entry.loaded_at if entry else time.time())),
        "size": model_bytes(entry) if entry is not None else 0,
        "digest": shapes.digest(path) if path else "",
        "details": shapes.details(engine.architecture, num_params, _dtypes(src)),
    }


def _dtypes(src: ModelSource | None) -> str:
    return dtype_summary(src.tensors.values()) if src is not None else "-"


@bp.get("/api/tags")
async def tags() -> Any:
    """Every active model in the store (+ the default model when it is not one)."""
    state = get_state()
    rows = []
    paths = set()
    for e in await anyio.to_thread.run_sync(store.list_models):
        if not e.active or e.error:
            continue
        paths.add(e.path.resolve())
        rows.append(
            {
                "name": e.name,
                "model": e.name,
                "modified_at": shapes.iso_time(e.modified),
                "size": e.size_bytes,
                "digest": shapes.digest(e.path),
                "details": shapes.details(e.architecture, e.num_params, e.dtypes),
            }
        )
    default = state.models.default if state.models is not None else None
    if default is None or default.path is None or default.path not in paths:
        row = _default_row(state)
        if row is not None:
            rows.insert(0, row)
    return {"models": rows}


@bp.get("/api/ps")
async def ps() -> Any:
    """Loaded models: Ollama's fields plus modelc's (memory, requests, KV use, adapters)."""
    state = get_state()
    if state.models is None:
        return {"models": [_ps_row_plain(state)] if state.engine is not None else []}
    rows = []
    for entry in state.models.loaded():
        d = state.models.describe(entry)
        src = model_source(entry.engine)
        src_cfg = src.config if src is not None else {}
        row = {
            "name": entry.name,
            "model": entry.name,
            "size": d["memory_bytes"],
            "digest": shapes.digest(entry.path) if entry.path else "",
            "details": shapes.details(d["architecture"], _num_params(entry.engine), _engine_dtypes(entry)),
            "expires_at": shapes.iso_time(d["expires_at"]),
            "size_vram": 0,  # CPU only
            "context_length": _context(entry.engine, src_cfg),
        }
        row.update({k: d[k] for k in ("default", "size_bytes", "kv_bytes", "running", "waiting")})
        row.update({k: d[k] for k in ("kv_blocks_used", "kv_blocks_total", "adapters", "replicas")})  # no server path
        rows.append(row)
    return {"models": rows}


def _context(engine: ServedModel | None, src_cfg: dict[str, Any]) -> int:
    """The tokens one sequence may hold in this engine (run --ctx-size), else the model's trained context."""
    n = getattr(engine, "context_length", None) or src_cfg.get("max_position_embeddings")
    return int(n or 0)


def _num_params(engine: ServedModel) -> int:
    src = model_source(engine)
    return src.num_params if src is not None else 0


def _engine_dtypes(entry: Any) -> str:
    return _dtypes(model_source(entry.engine))


def _ps_row_plain(state: ServerState) -> dict[str, Any]:
    engine = state.engine
    return {
        "name": engine.name,
        "model": engine.name,
        "size": 0,
        "digest": "",
        "details": shapes.details(engine.architecture, _num_params(engine), "-"),
        "expires_at": shapes.NEVER,
        "size_vram": 0,
        "context_length": int(engine.context_length or 0),
    }


@bp.post("/api/show")
async def show() -> Any:
    state = get_state()
    name = model_name(await read_json())

    path = _path_of(state, name)
    if path is None:  # the default model served from memory
        engine = current_engine(state)
        src = engine.source
        arch, cfg, n = engine.architecture, dict(src.config) if src is not None else {}, _num_params(engine)
        template = src.chat_template if src is not None else None

        caps = engine_capabilities(engine)
        det, modified = shapes.details(arch, n, "-"), state.started_at
    else:
        with hidden_path(path, name):  # a corrupt file's error names the model, not the file
            art = await anyio.to_thread.run_sync(read_header_only, path)
        arch, cfg, n, template = art.architecture, art.config, art.num_params, art.chat_template
        caps = source_capabilities(art)
        det, modified = shapes.header_details(art), path.stat().st_mtime
    return {
        "modelfile": f"# modelc artifact\nFROM {name}\n",  # never the server's path
        "parameters": "",
        "template": template or "",
        "details": det,
        "model_info": shapes.model_info(arch, cfg, n),
        "capabilities": caps,
        "modified_at": shapes.iso_time(modified),
    }


def _path_of(state: ServerState, name: str) -> Path | None:
    """The artifact file `name` refers to; None for a default model that has no file."""
    manager = state.models
    base = manager.split_adapter(name)[0] if manager is not None else name
    default = manager.default if manager is not None else None
    if default is not None and (base == default.name or (default.engine is not None and base == default.engine.name)):
        return default.path
    if manager is None and state.engine is not None and base == state.engine.name:
        return None
    return resolve_model(base.removesuffix(":latest"), state.config.models_dirs)


@bp.post("/api/pull")
@control_route
async def pull() -> Any:
    """Download from the registry ($MODELC_REGISTRY or `registry` in the body) with NDJSON progress, or
    from a remote source the operator allowed (hf.co/..., ollama://..., pypi:...: server/pull_stream.py)."""
    body = await read_json()
    name = model_name(body)
    if looks_remote(name):
        return await remote_pull(get_state(), name, body)
    loc = registry.location(_pull_registry(get_state(), body.get("registry")))
    entry = await anyio.to_thread.run_sync(registry.find, name.removesuffix(":latest"), loc)
    stream = body.get("stream", True)
    if not stream:
        await anyio.to_thread.run_sync(lambda: registry.pull(name.removesuffix(":latest"), loc=loc))
        return {"status": "success"}
    return Response(_pull_events(name.removesuffix(":latest"), loc, entry), content_type=NDJSON)


def _pull_registry(state: ServerState, asked: Any) -> str | None:
    """The registry a pull may use: one the operator configured (--registry, else $MODELC_REGISTRY);
    a request may pick among them but never name another URL or folder."""
    allowed = state.config.registries or tuple(filter(None, [os.environ.get("MODELC_REGISTRY")]))
    if asked is None or asked == "":
        return allowed[0] if allowed else None
    if not isinstance(asked, str) or asked not in allowed:
        raise ForbiddenError(
            "'registry' must be one the server's operator configured (modelc run --registry, MODELC_REGISTRY)"
        )
    return asked


async def _pull_events(spec: str, loc: str, entry: Any) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[int, int] | None] = asyncio.Queue()
    last = [0.0]

    def progress(done: int, total: int) -> None:  # runs in the worker thread: throttled, thread-safe
        now = time.monotonic()
        if now - last[0] >= 0.1 or done >= total:
            last[0] = now
            loop.call_soon_threadsafe(queue.put_nowait, (done, total))

    async def run() -> None:
        try:
            await anyio.to_thread.run_sync(lambda: registry.pull(spec, loc=loc, progress=progress))
        finally:
            queue.put_nowait(None)

    yield ndjson({"status": "pulling manifest"})
    task = asyncio.create_task(run())
    digest = f"sha256:{entry.sha256}"
    try:
        while (item := await queue.get()) is not None:
            done, total = item
            yield ndjson(
                {"status": f"pulling {entry.sha256[:12]}", "digest": digest, "total": total, "completed": done}
            )
        await task
        yield ndjson({"status": "verifying sha256 digest"})
        yield ndjson({"status": "writing manifest"})
        yield ndjson({"status": "success"})
    except ModelcError as e:
        yield ndjson({"error": e.message})
    finally:
        if not task.done():
            task.cancel()


@bp.delete("/api/delete")
@control_route
async def delete() -> Any:
    state = get_state()
    name = model_name(await read_json()).removesuffix(":latest")
    if state.models is not None and state.models.find(name) is not None:
        await state.models.unload(name)
    store.remove(name, all_versions=True)
    return Response("", status=200)


@bp.post("/api/copy")
@control_route
async def copy() -> Any:
    body = await read_json()
    src, dst = body.get("source"), body.get("destination")
    if not isinstance(src, str) or not src or not isinstance(dst, str) or not dst:
        raise InvalidRequestError("'source' and 'destination' (model names) are required", param="source")
    state = get_state()
    source = _path_of(state, src)  # a store name or a file under --models-dir, never another path
    if source is None:
        raise InvalidRequestError(f"model {src!r} is served from memory and has no file to copy", param="source")
    with hidden_path(source, src):
        await anyio.to_thread.run_sync(store.copy, str(source), dst.removesuffix(":latest"))
    return Response("", status=200)


@bp.post("/api/load")
@control_route
async def load() -> Any:
    state = get_state()
    body = await read_json()
    name = model_name(body)
    started = time.monotonic()
    cfg = engine_config_for(state.models.engine_config if state.models is not None else None, body)
    if cfg is not None:
        if state.models is None or not name:
            raise InvalidRequestError("load options need a model name (the default model keeps the options it "
                                      "was started with)", param="options")  # fmt: skip
        await state.models.load(state.models.split_adapter(name)[0], parse_keep_alive(body.get("keep_alive")), cfg)
    engine = await model_for(state, name, body.get("keep_alive"))
    return {"model": name, "loaded": True, "architecture": engine.architecture, "load_duration": shapes.ns(
        time.monotonic() - started)}  # fmt: skip


@bp.post("/api/unload")
@control_route
async def unload() -> Any:
    state = get_state()
    name = model_name(await read_json())
    if state.models is None:
        raise InvalidRequestError("this server serves one model and cannot unload it", param="model")
    return {"model": name, "unloaded": await state.models.unload(name)}


@bp.post("/api/lora/load")
@control_route
async def lora_load() -> Any:
    state = get_state()
    body = await read_json()
    name = model_name(body, required=False)
    path = body.get("path")
    if not isinstance(path, str) or not path:
        raise InvalidRequestError("'path' (a LoRA adapter .safetensors file) is required", param="path")
    adapter = body.get("adapter") or os.path.splitext(os.path.basename(path.rstrip("/")))[0]
    path = str(resolve_adapter(path, state.config.adapters_dir))  # only inside --adapters-dir
    alpha, global_ = body.get("alpha", 1.0), body.get("global", False)
    if isinstance(alpha, bool) or not isinstance(alpha, int | float):
        raise InvalidRequestError("'alpha' must be a number", param="alpha")
    if not isinstance(global_, bool) or not isinstance(adapter, str):
        raise InvalidRequestError("'global' must be a boolean and 'adapter' a string", param="global")
    started = time.monotonic()
    with hidden_path(path, adapter):
        if state.models is None or not name:
            info = await current_engine(state).load_adapter(adapter, path, alpha=float(alpha), global_=global_)
            if state.models is not None and state.models.default is not None:
                state.models.default.adapters.add(adapter)
        else:
            info = await state.models.load_adapter(name, adapter, path, float(alpha), global_)
    info = info if isinstance(info, dict) else {}
    return {
        "model": name,
        "adapter": adapter,
        "global": global_,
        "applied": int(info.get("applied", 0)),
        "skipped": int(info.get("skipped", 0)),
        "load_duration": shapes.ns(time.monotonic() - started),
    }


@bp.post("/api/lora/unload")
@control_route
async def lora_unload() -> Any:
    state = get_state()
    body = await read_json()
    name = model_name(body, required=False)
    adapter = body.get("adapter")
    if not isinstance(adapter, str) or not adapter:
        raise InvalidRequestError("'adapter' (the adapter's name) is required", param="adapter")
    if state.models is None or not name:
        await current_engine(state).unload_adapter(adapter)
        if state.models is not None and state.models.default is not None:
            state.models.default.adapters.discard(adapter)
    else:
        if state.models.find(name) is None:
            raise NotFoundError(f"model {name!r} is not loaded", param="model")
        await state.models.unload_adapter(name, adapter)
    return {"model": name, "adapter": adapter, "unloaded": True}


@bp.post("/api/shutdown")
@control_route
async def shutdown() -> Any:
    """Graceful stop (`modelc stop`): answer, then stop accepting and drain in-flight requests."""
    state = get_state()
    if state.request_shutdown is None:
        raise InvalidRequestError("this server was not started by `modelc run` and cannot be stopped over HTTP")
    asyncio.get_running_loop().call_later(0.05, state.request_shutdown)
    return {"status": "shutting down", "pid": os.getpid()}
