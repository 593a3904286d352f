"""EngineReplica: one engine replica (scheduler core + runners + KV pages + prefix cache) inside a
Ray actor process. It is an AsyncEngine held open on the actor's event loop; Ray carries the same
messages the in-process actors exchange (generate -> token events, abort, adapters, stats).

Plain class: modelc.replicas.engine wraps it with `ray.remote` (Ray is an optional extra and
nothing here imports it). Every event it yields carries the replica's load, so the front's router
sees it with every step.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelc import registry
from modelc.errors import ChecksumError, ModelcError, NotFoundError

LOAD_KEYS = ("running", "waiting", "kv_blocks_used", "kv_blocks_total")


@dataclass(frozen=True, slots=True)
class ModelRef:
    """How a replica finds the artifact: a path (local, or shared storage every node mounts) or a
    registry entry to pull; `sha256` (of the whole file) must match either way."""

    sha256: str
    path: str | None = None
    registry: str | None = None  # the operator's registry location
    registry_spec: str | None = None  # NAME[:VERSION] in it


def file_sha256(path: str | os.PathLike[str]) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def fetch_model(ref: ModelRef) -> Path:
    """The artifact on this node, checked against ref.sha256 (a mismatch is refused)."""
    if ref.path and Path(ref.path).is_file():
        path = Path(ref.path)
    elif ref.registry_spec:
        path = registry.pull(ref.registry_spec, loc=ref.registry)
    else:
        raise NotFoundError("the model is not on this node and no registry entry was given to pull it")
    actual = file_sha256(path)
    if actual != ref.sha256:
        raise ChecksumError(
            f"this node's copy of the model has sha256 {actual[:16]}..., the server expects {ref.sha256[:16]}...: refused"
        )
    return path


class EngineReplica:
    """Ray actor body. Methods are async and run on the actor's one event loop."""

    def __init__(self, ref: ModelRef, engine_config: Any, replica_id: int) -> None:
        self.ref = ref
        self.engine_config = engine_config
        self.replica_id = replica_id
        self._engine: Any = None
        self._ready: asyncio.Event | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._task: asyncio.Task | None = None

    async def start(self) -> dict[str, Any]:
        """Load the model (once; again after Ray restarts the actor) and report who we are."""
        if self._task is None:
            self._ready, self._stop = asyncio.Event(), asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._hold())
        await self._ready.wait()
        if self._error is not None:
            raise self._error
        return {"replica_id": self.replica_id, "pid": os.getpid(), **self._load()}

    async def _hold(self) -> None:
        # lazy: the tokenizer/template stack loads only when this path runs
        from modelc.api.async_engine import AsyncEngine

        try:
            path = await asyncio.to_thread(fetch_model, self.ref)
            async with AsyncEngine.open(str(path), self.engine_config) as engine:
                self._engine = engine
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:  # reported to every caller of start()
            self._error = exc if isinstance(exc, ModelcError) else ModelcError(f"replica failed to load: {exc}")
            self._ready.set()
        finally:
            self._engine = None

    async def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()
        if self._task is not None:
            await self._task

    def _load(self) -> dict[str, int]:
        stats = self._engine.stats() if self._engine is not None else {}
        return {k: int(stats.get(k, 0)) for k in LOAD_KEYS}

    async def generate(self, prompt: list[int], params: Any, request_id: str) -> AsyncIterator[tuple[Any, dict]]:
        """(event, load) pairs: TokenEvents, then one Finished. Cancelling the Ray task (ray.cancel)
        cancels this coroutine; leaving AsyncEngine.generate aborts the sequence and frees its KV."""
        await self.start()
        async with aclosing(self._engine.generate(prompt, params, request_id=request_id)) as events:
            async for ev in events:
                yield ev, self._load()

    async def abort(self, request_id: str) -> bool:
        await self.start()
        return await self._engine.abort(request_id)

    async def embed(self, token_id_lists: list[list[int]], normalize: bool = True) -> Any:
        await self.start()
        return await self._engine.embed(token_id_lists, normalize=normalize)

    async def load_adapter(self, name: str, path: str, alpha: float, global_: bool) -> Any:
        await self.start()
        return await self._engine.load_adapter(name, path, alpha=alpha, global_=global_)

    async def unload_adapter(self, name: str) -> None:
        await self.start()
        await self._engine.unload_adapter(name)

    async def slots(self) -> list[Any]:
        await self.start()
        return await self._engine.slots()

    async def scale_adapters(self, scales: dict[str, float]) -> None:
        await self.start()
        await self._engine.scale_adapters(scales)

    async def stats(self) -> dict[str, Any]:
        await self.start()
        return dict(self._engine.stats())

    async def ping(self) -> int:
        return os.getpid()

    async def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()
