"""ModelManager: several models in one daemon, as Ollama does.

Requests name their model; a stored model not yet loaded is loaded on first use (concurrent first
requests share one load), idle models unload after their keep-alive, and --max-loaded-models bounds
how many are loaded (least recently used idle one unloaded first; never one with requests in flight).
The default model (the one `modelc run` named) is pinned: it stays loaded for the daemon's life.

Each loaded model is one task of the manager's task group holding `open_engine(...)` open; unloading
sets its stop event and waits for the engine to close. No HTTP here.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from modelc import store
from modelc.api.opener import open_engine
from modelc.errors import (
    EngineError,
    InvalidRequestError,
    ManagerUnavailableError,
    ModelcError,
    NotFoundError,
    OverloadedError,
)
from modelc.pull.ref import store_name_of
from modelc.server.manager.loaded import (
    GRACE_S,
    LoadedModel,
    ModelView,
    engine_adapters,
    engine_stats,
    kv_bytes,
    model_bytes,
    parse_keep_alive,
)
from modelc.server.manager.lookup import resolve_model
from modelc.server.served import ServedModel

__all__ = ["LoadedModel", "ModelManager", "ModelView", "parse_keep_alive"]

DEFAULT_KEEP_ALIVE_S = 300.0  # Ollama's default: 5 minutes
DEFAULT_MAX_LOADED_MODELS = 3  # Ollama's default on CPU
_VERSION = re.compile(r"[0-9]+")


def _without_path(e: ModelcError, entry: LoadedModel) -> ModelcError:
    """The same error with the artifact's server path replaced by the model's name."""
    out = copy.copy(e)
    out.message = e.message.replace(str(entry.path), f"model {entry.name}")
    out.args = (out.message,)
    return out


class ModelManager:
    """Loads, tracks and unloads the daemon's models. Start it with `await tg.start(manager.run)`."""

    def __init__(
        self,
        *,
        engine_config: Any = None,
        keep_alive_s: float = DEFAULT_KEEP_ALIVE_S,
        max_loaded_models: int | None = DEFAULT_MAX_LOADED_MODELS,
        opener: Callable[..., Any] | None = None,
        tick_s: float = 0.25,
        grace_s: float = GRACE_S,
        models_dirs: tuple[str, ...] = (),
    ) -> None:
        if max_loaded_models is not None and max_loaded_models < 1:
            raise InvalidRequestError("--max-loaded-models must be >= 1", param="max_loaded_models")
        self.engine_config = engine_config
        self.keep_alive_s = float(keep_alive_s)
        self.max_loaded_models = max_loaded_models
        self.tick_s = tick_s
        self.grace_s = grace_s
        self.models_dirs = tuple(models_dirs)  # --models-dir: where requests may name files (server/manager/lookup.py)
        self._opener = opener
        self._entries: dict[str, LoadedModel] = {}
        self._default: LoadedModel | None = None
        self._aliases: set[str] = set()
        self._tg: anyio.abc.TaskGroup | None = None

    # -- life cycle -----------------------------------------------------------------------------

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Host the loaded models and unload idle ones until cancelled (then every model closes)."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            try:
                while True:
                    await anyio.sleep(self.tick_s)
                    await self.reap()
            finally:
                self._tg = None
                tg.cancel_scope.cancel()

    def set_default(self, engine: ServedModel, name: str | None = None, path: str | Path | None = None) -> LoadedModel:
        """Register the already-open default model (pinned). `name` is what requests may call it
        (besides engine.name)."""
        resolved = Path(path).resolve() if path is not None else None
        name = name or engine.name or "default"
        entry = LoadedModel(str(resolved) if resolved else f"default:{name}", name, resolved, -1.0, pinned=True)
        entry.engine = engine
        entry.loaded_at = time.time()
        entry.ready.set()
        self._entries[entry.key] = entry
        self._default = entry
        self._aliases = {name, engine.name or name}
        if resolved is not None:  # the operator's own command-line path names it too
            self._aliases.add(str(resolved))
        return entry

    @property
    def default(self) -> LoadedModel | None:
        return self._default

    # -- lookup and loading ---------------------------------------------------------------------

    async def get(self, name: str, keep_alive_s: float | None = None, engine_config: Any = None) -> ModelView:
        """The model `name` (a store name, name:VERSION, name:latest, a .modelc path, or base:adapter),
        loaded if need be. keep_alive_s (a request's keep_alive) resets its keep-alive; engine_config
        (load options) applies when this call loads it."""
        base, adapter = self.split_adapter(name)
        entry = await self.load(base, keep_alive_s, engine_config)
        if adapter is not None and adapter not in entry.adapters and adapter not in engine_adapters(entry.engine):
            raise NotFoundError(
                f"model {base!r} has no LoRA adapter {adapter!r} loaded; load it with "
                f"`modelc lora load {base} PATH --name {adapter}`",
                param="model",
            )
        return ModelView(entry, name, adapter)

    def split_adapter(self, name: str) -> tuple[str, str | None]:
        """ "base:adapter" -> (base, adapter); "name:3" (a version), "name:latest" and a remote reference's
        tag ("hf.co/org/repo:Q4_K_M", "ollama://name:tag") are model names."""
        if name in self._aliases or ":" not in name or store_name_of(name) is not None:
            return name, None
        base, tag = name.rsplit(":", 1)
        if tag == "latest":
            return base, None
        if _VERSION.fullmatch(tag) or not base or "/" in tag or tag.endswith(".modelc"):
            return name, None
        return base, tag

    def find(self, name: str) -> LoadedModel | None:
        """The loaded (or loading) model `name` refers to, without loading anything."""
        base, _ = self.split_adapter(name)
        if base in self._aliases and self._default is not None:
            return self._default
        try:
            key = self._key(base)
        except ModelcError:
            return None
        return self._entries.get(key)

    def _key(self, name: str) -> str:
        """The real path of the artifact `name` names: a store name or a file under --models-dir only."""
        return str(resolve_model(name, self.models_dirs).resolve())

    async def load(self, name: str, keep_alive_s: float | None = None, engine_config: Any = None) -> LoadedModel:
        """Load `name` (no adapter part) unless it is loaded; concurrent callers share one load.
        engine_config: this model's own load options (None = the daemon's); a model loaded with
        other options must be unloaded first."""
        if name.endswith(":latest"):
            name = name[: -len(":latest")]
        if name in self._aliases and self._default is not None:
            entry = self._default
        else:
            key = self._key(name)  # NotFoundError for unknown names
            entry = self._entries.get(key)
            if entry is None or entry.stop.is_set():
                if entry is not None:
                    await entry.done.wait()  # an unload in progress: wait, then load afresh
                entry = self._entries.get(key) or await self._start_load(key, name, engine_config)
        if engine_config is not None and engine_config != (entry.engine_config or self.engine_config):
            raise InvalidRequestError(
                f"model {name!r} is loaded with other options; unload it first to change them", param="options"
            )
        await entry.ready.wait()
        if entry.error is not None:
            raise entry.error
        if keep_alive_s is not None and not entry.pinned:
            entry.keep_alive_s = keep_alive_s
        entry.touch()
        return entry

    async def _start_load(self, key: str, name: str, engine_config: Any = None) -> LoadedModel:
        if self._tg is None:
            raise ManagerUnavailableError("the daemon's model manager is not running; retry shortly")
        await self._make_room()
        existing = self._entries.get(key)  # another request may have started it while we made room
        if existing is not None:
            return existing
        entry = LoadedModel(key, name, Path(key), self.keep_alive_s, engine_config=engine_config)
        self._entries[key] = entry
        self._tg.start_soon(self._hold, entry)
        return entry

    async def _hold(self, entry: LoadedModel) -> None:
        """The task that keeps one model open until its stop event; load errors go to the waiters."""
        started = time.monotonic()
        opener = self._opener or open_engine
        try:
            async with opener(entry.path, entry.engine_config or self.engine_config) as engine:
                entry.engine = engine
                entry.loaded_at = time.time()
                entry.load_duration_s = time.monotonic() - started
                entry.touch()
                entry.ready.set()
                await entry.stop.wait()
        except ModelcError as e:  # answered to requests: the file's location stays on the server
            entry.error = e if str(entry.path) not in e.message else _without_path(e, entry)
            # keep no frames of the failed load alive (their locals may hold whatever it allocated)
            entry.error.__traceback__ = entry.error.__context__ = entry.error.__cause__ = None
        except Exception as e:  # a broken model must not take the daemon's other models down
            entry.error = EngineError(
                f"model {entry.name} failed: {type(e).__name__}: {e}".replace(str(entry.path), entry.name)
            )
        finally:
            entry.engine = None
            if self._entries.get(entry.key) is entry:
                del self._entries[entry.key]
            if entry.error is None and not entry.ready.is_set():
                entry.error = ManagerUnavailableError(f"model {entry.name} was unloaded while loading")
            entry.ready.set()
            entry.done.set()

    async def _make_room(self) -> None:
        """Unload least recently used idle models until one more fits under max_loaded_models."""
        limit = self.max_loaded_models
        while limit is not None and len(self._entries) >= limit:
            idle = [
                e for e in self._entries.values() if not e.pinned and e.ready.is_set() and e.running_requests() == 0
            ]
            if not idle:
                raise OverloadedError(
                    f"{len(self._entries)} models are loaded and busy (--max-loaded-models {limit}); retry later"
                )
            await self._unload(min(idle, key=lambda e: e.last_used))

    # -- unloading ------------------------------------------------------------------------------

    async def unload(self, name: str) -> bool:
        """Unload `name` now (its running requests end with finish_reason "abort"). False if not loaded."""
        entry = self.find(name)
        if entry is None:
            return False
        if entry.pinned:
            raise ModelcError(
                f"model {entry.name!r} is the daemon's default model and stays loaded; stop the daemon "
                "with `modelc stop`",
                param="model",
            )
        await self._unload(entry)
        return True

    async def _unload(self, entry: LoadedModel) -> None:
        if self._entries.get(entry.key) is entry:
            del self._entries[entry.key]
        entry.stop.set()
        await entry.done.wait()

    async def reap(self) -> list[str]:
        """Unload every model idle past its keep-alive; returns their names."""
        now = time.monotonic()
        gone = []
        for entry in list(self._entries.values()):
            left = entry.expires_in_s(now)
            if left is None or left > 0 or not entry.ready.is_set():
                continue
            if now - entry.last_used < self.grace_s or entry.running_requests() > 0:
                continue
            await self._unload(entry)
            gone.append(entry.name)
        return gone

    # -- adapters and reporting -----------------------------------------------------------------

    async def load_adapter(self, name: str, adapter: str, path: str, alpha: float = 1.0, global_: bool = False) -> Any:
        entry = await self.load(self.split_adapter(name)[0])
        entry.begin()
        try:
            info = await entry.engine.load_adapter(adapter, path, alpha=alpha, global_=global_)
        finally:
            entry.end()
        entry.adapters.add(adapter)
        return info

    async def unload_adapter(self, name: str, adapter: str) -> None:
        entry = self.find(name)
        if entry is None or entry.engine is None:
            raise NotFoundError(f"model {name!r} is not loaded", param="model")
        await entry.engine.unload_adapter(adapter)
        entry.adapters.discard(adapter)

    def available(self) -> list[str]:
        """Names requests may use: the default model's, the loaded ones', every active store model's."""
        names = [e.name for e in self.loaded()]
        names += [e.name for e in store.list_models() if e.active and e.name not in names]
        return names

    def loaded(self) -> list[LoadedModel]:
        """Loaded models (not those still loading), the default first, then most recently used."""
        ready = [e for e in self._entries.values() if e.ready.is_set() and e.engine is not None]
        return sorted(ready, key=lambda e: (not e.pinned, -e.last_used))

    def describe(self, entry: LoadedModel) -> dict[str, Any]:
        """What `modelc ps` shows for one model: memory (artifact + KV bytes), requests, KV use."""
        stats = engine_stats(entry.engine)
        size = model_bytes(entry)
        kv = kv_bytes(entry.engine, int(stats.get("kv_blocks_total", 0) or 0))
        return {
            "name": entry.name,
            "path": str(entry.path) if entry.path else None,
            "architecture": entry.engine.architecture if entry.engine is not None else "",
            "default": entry.pinned,
            "size_bytes": size,
            "kv_bytes": kv,
            "memory_bytes": size + kv,
            "running": int(stats.get("running", 0) or 0),
            "waiting": int(stats.get("waiting", 0) or 0),
            "kv_blocks_used": int(stats.get("kv_blocks_used", 0) or 0),
            "kv_blocks_total": int(stats.get("kv_blocks_total", 0) or 0),
            "adapters": sorted(entry.adapters | set(engine_adapters(entry.engine))),
            "loaded_at": entry.loaded_at,
            "load_duration_s": entry.load_duration_s,
            "expires_at": entry.expires_at(),
            "replicas": stats.get("replicas") or [],  # Ray engine replicas (modelc/replicas/), if any
        }
