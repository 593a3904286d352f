"""open_engine(source, config): the one front door that serves a model of any kind, as the server and the
daemon's model manager open them: an AsyncEngine for a causal LM (Ray replicas where the config asks), the
encoder / MLP / ONNX engines of api/engines.py for the rest."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import anyio

from modelc.api.async_engine import AsyncEngine
from modelc.api.engines import EncoderEngine, InferEngine, adapter_for
from modelc.artifact.reader import open_artifact
from modelc.config import EngineConfig
from modelc.errors import UnsupportedError


@contextlib.asynccontextmanager
async def open_engine(source: Any, engine_config: EngineConfig | None = None, chat_template: str | None = None):
    """An engine for a model source: encoder/MLP/ONNX models through their adapters (api/engines.py), causal LMs
    through AsyncEngine.open, or Ray replicas where engine_config asks. Paths are opened as .modelc artifacts.
    `chat_template`: the Jinja source that replaces the model's own (`modelc run --chat-template FILE`)."""
    path = source if isinstance(source, str | Path) else None
    if path is not None:
        source = open_artifact(path)

    adapter = adapter_for(source)
    if chat_template is not None:
        source = with_chat_template(source, chat_template, adapter is not None, engine_config)
    if adapter is not None:
        if isinstance(adapter, EncoderEngine | InferEngine) and (engine_config is None or engine_config.warmup):
            await anyio.to_thread.run_sync(adapter.warmup)
        yield adapter
        return
    if engine_config is not None and engine_config.replicas is not None:
        if path is None:
            raise UnsupportedError("Ray replicas load the model from its .modelc file; pass a path or store name")
        from modelc.replicas.engine import ReplicaEngine  # layer: replicas run AsyncEngines, so a floor above api

        async with ReplicaEngine.open(path, engine_config) as engine:
            yield engine
        return

    if engine_config is None:
        engine_config = EngineConfig()
    async with AsyncEngine.open(source, engine_config) as engine:
        yield engine


def with_chat_template(source: Any, text: str, adapted: bool, engine_config: EngineConfig | None) -> Any:
    """`source` with its chat template replaced by `text` (read by the operator's CLI, never by a
    request), so the tokenizer side, /props and the capabilities all see the one template."""
    name = getattr(source, "name", "") or "the model"
    if adapted:
        raise UnsupportedError(f"--chat-template: {name} ({source.architecture}) does not chat (no text generation)")
    if engine_config is not None and engine_config.replicas is not None:
        raise UnsupportedError("--chat-template cannot be combined with --ray: the replicas read the model's own")
    source.chat_template = text
    return source
