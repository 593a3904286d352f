"""One model the daemon holds (LoadedModel: state, keep-alive clock, in-flight count), a request's view
of it (ModelView), Ollama's keep_alive values, and the memory figures `modelc ps` shows.

No loading or unloading here (models.py); no HTTP.
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
import numpy as np

from modelc.cache.budget import kv_bytes_per_block
from modelc.errors import InvalidRequestError, ModelcError
from modelc.request import GenerateEvent, SamplingParams
from modelc.server.served import ModelSource, ServedModel, embedding, generating, inferring, reranking

GRACE_S = 2.0  # a model handed to a request counts as busy this long, before its first generate() starts


def parse_keep_alive(value: Any) -> float | None:
    """Ollama's keep_alive: seconds (number), a duration string ("5m", "1h30m", "10s", "0", "-1"), or None.

    Returns seconds; negative = never unload; None = the daemon's default."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise InvalidRequestError(
            "'keep_alive' must be a number of seconds or a duration like '5m'", param="keep_alive"
        )
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise InvalidRequestError("'keep_alive' must be a finite number of seconds", param="keep_alive")
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            pass
        else:
            if math.isfinite(seconds):
                return seconds
        units = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
        parts = re.findall(r"(-?[0-9.]+)(ms|s|m|h)", text)
        if parts and "".join(n + u for n, u in parts) == text:
            total = sum(float(n) * units[u] for n, u in parts)
            return -1.0 if text.startswith("-") else total
    raise InvalidRequestError(
        f"'keep_alive' {value!r} is not a duration (use seconds or e.g. '5m', '-1')", param="keep_alive"
    )


@dataclass(slots=True)
class LoadedModel:
    """One model the manager holds (loading, loaded, or unloading). Owned by the manager's event loop."""

    key: str  # the resolved artifact path (or the default model's name when it has no path)
    name: str  # the name it was first asked by
    path: Path | None
    keep_alive_s: float
    pinned: bool = False
    engine: ServedModel = None
    error: ModelcError | None = None
    loaded_at: float = 0.0  # unix time
    load_duration_s: float = 0.0
    last_used: float = field(default_factory=time.monotonic)
    num_in_flight: int = 0
    adapters: set[str] = field(default_factory=set)
    engine_config: Any = None  # its own load options (None = the daemon's)
    ready: anyio.Event = field(default_factory=anyio.Event)
    stop: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)

    def touch(self) -> None:
        self.last_used = time.monotonic()

    def begin(self) -> None:
        self.num_in_flight += 1
        self.touch()

    def end(self) -> None:
        self.num_in_flight -= 1
        self.touch()

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """Count one call as in flight while it runs."""
        self.begin()
        try:
            yield
        finally:
            self.end()

    def running_requests(self) -> int:
        """Requests this model is serving now: our own count, or the engine's running + waiting."""
        stats = engine_stats(self.engine)
        return max(self.num_in_flight, int(stats.get("running", 0)) + int(stats.get("waiting", 0)))

    def expires_in_s(self, now: float | None = None) -> float | None:
        """Seconds until the keep-alive unloads it (from its last use); None = never."""
        if self.pinned or self.keep_alive_s < 0:
            return None
        now = time.monotonic() if now is None else now
        return self.last_used + self.keep_alive_s - now

    def expires_at(self) -> float | None:
        """Unix time the keep-alive unloads it (if it stays idle), None = never."""
        left = self.expires_in_s()
        return None if left is None else time.time() + max(left, 0.0)


def engine_stats(engine: ServedModel | None) -> dict[str, Any]:
    if engine is None:
        return {}
    try:
        return dict(engine.stats() or {})
    except Exception:  # a stats snapshot must never break ps or the reaper
        return {}


class ModelView:
    """The engine as one request sees it (a server.served.ServedModel): `name` is the name asked for,
    a LoRA adapter named by "base:adapter" is applied, and generate/embed/rerank/infer calls are
    counted as in flight (a busy model is never unloaded under a request)."""

    def __init__(self, entry: LoadedModel, name: str, adapter: str | None = None) -> None:
        engine: ServedModel = entry.engine
        self._entry = entry
        self._engine = engine
        self.name = name
        self.adapter = adapter
        self.architecture = engine.architecture
        self.tokenizer = engine.tokenizer
        self.chat_template = engine.chat_template
        self.serves = engine.serves
        self.source = engine.source
        self.context_length = engine.context_length
        self.config = engine.config

    @property
    def engine(self) -> ServedModel:
        return self._engine

    def stats(self) -> dict[str, Any]:
        return self._engine.stats()

    @property
    def adapters(self) -> list[str]:
        return self._engine.adapters

    async def load_adapter(self, name: str, path: str, alpha: float = 1.0, global_: bool = False) -> Any:
        return await self._engine.load_adapter(name, path, alpha=alpha, global_=global_)

    async def unload_adapter(self, name: str) -> None:
        await self._engine.unload_adapter(name)

    async def scale_adapters(self, scales: dict[str, float]) -> None:
        await self._engine.scale_adapters(scales)

    def adapter_table(self) -> list[tuple[int, str, str, float]]:
        return self._engine.adapter_table()

    async def slots(self) -> list[Any] | None:
        return await self._engine.slots()

    async def generate(
        self, prompt_token_ids: list[int], params: SamplingParams, request_id: str | None = None
    ) -> AsyncIterator[GenerateEvent]:
        if self.adapter is not None and params.adapter is None:
            params = replace(params, adapter=self.adapter)
        self._entry.begin()
        try:
            gen = generating(self._engine).generate(prompt_token_ids, params, request_id=request_id)
            try:
                async for ev in gen:
                    yield ev
            finally:
                await gen.aclose()
        finally:
            self._entry.end()

    async def embed(self, token_id_lists: list[list[int]], normalize: bool = True) -> np.ndarray:
        with self._entry.busy():
            return await embedding(self._engine).embed(token_id_lists, normalize=normalize)

    async def rerank(self, query: str, documents: Sequence[str], **options: Any) -> Any:
        with self._entry.busy():
            return await reranking(self._engine).rerank(query, documents, **options)

    async def infer(self, payload: dict[str, Any]) -> dict[str, Any]:
        with self._entry.busy():
            return await inferring(self._engine).infer(payload)


def engine_adapters(engine: ServedModel) -> list[str]:
    return list(engine.adapters)


def model_source(engine: ServedModel | None) -> ModelSource | None:
    return engine.source if engine is not None else None


def model_bytes(entry: LoadedModel) -> int:
    """The artifact's size on disk (what mmap may bring in), else the source's tensor bytes."""
    if entry.path is not None:
        try:
            return entry.path.stat().st_size
        except OSError:
            pass
    src = model_source(entry.engine)
    return src.total_bytes if src is not None else 0


def kv_bytes(engine: ServedModel, num_blocks: int) -> int:
    """Bytes of the engine's KV pages: blocks x bytes per block (all layers, K and V)."""
    if num_blocks <= 0:
        return 0

    src = model_source(engine)
    if src is None or engine.config is None or not src.config.get("num_hidden_layers"):
        return 0
    cache = engine.config.cache
    try:
        return num_blocks * kv_bytes_per_block(src.config, cache.block_size, cache.kv_dtype)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return 0
