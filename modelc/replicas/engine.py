"""ReplicaEngine: the front of a Ray scale-out. It has AsyncEngine's shape (generate, abort, embed,
adapters, stats), so the server and the daemon serve it unchanged, and sends each request to one
engine replica (modelc/replicas/replica.py, a Ray actor) chosen by the router.

Failover: a replica whose process dies is dropped from routing at once; a request that had not
streamed a token yet is sent to another replica, a streamed one ends with a clear error event.
Ray restarts the actor; a watch task re-loads it, re-applies the LoRA adapters and lets it rejoin.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import anyio

from modelc.artifact.reader import open_artifact
from modelc.cache.block_pool import prefix_hashes
from modelc.config import EngineConfig, ReplicaConfig
from modelc.engine.adapter_table import AdapterTable
from modelc.engine.model_info import ModelInfo
from modelc.errors import EngineError, InvalidRequestError, ModelcError, OverloadedError
from modelc.replicas.cluster import connected
from modelc.replicas.replica import LOAD_KEYS, EngineReplica, ModelRef, file_sha256
from modelc.replicas.router import ReplicaLoad, Router
from modelc.request import Finished, SamplingParams, TokenEvent

WATCH_INTERVAL_S = 1.0
STATS_KEYS = (*LOAD_KEYS, "prefix_queries", "prefix_hits", "preemptions", "engine_restarts")


class ReplicaEngine:
    """Build it with `ReplicaEngine.open(path, engine_config)` (engine_config.replicas set)."""

    serves: frozenset[str] = frozenset({"generate", "embed"})  # the server's contract (server/served.py)

    def __init__(self, source: Any, config: EngineConfig, ray: Any, actors: list[Any]) -> None:
        self.source = source
        self.config = config
        self.info = ModelInfo.of(source)
        self.name: str = self.info.name
        self.architecture: str = self.info.architecture
        self.tokenizer = self.info.tokenizer
        self.chat_template = self.info.chat_template
        self._ray = ray
        self._actors = actors
        rc = config.replicas
        cap = rc.max_in_flight or config.scheduler.max_num_seqs + config.scheduler.max_queue
        self._loads = [ReplicaLoad(i, max_in_flight=cap) for i in range(len(actors))]
        self._full_stats: list[dict[str, Any]] = [{} for _ in actors]
        self._router = Router(rc.policy, max_imbalance=max(2, config.scheduler.max_num_seqs // 2))
        self._adapters = AdapterTable()  # stable ids, paths, how each was loaded, the global scales
        self._live: dict[str, tuple[int, Any]] = {}  # request id -> (replica, stream)
        self._ids = itertools.count(1)
        self._block_size = config.cache.block_size
        self.num_failovers = 0
        self.num_replica_deaths = 0

    # -- life cycle ----------------------------------------------------------------------------

    @classmethod
    @asynccontextmanager
    async def open(cls, path: str | os.PathLike[str], config: EngineConfig) -> AsyncIterator[ReplicaEngine]:
        rc: ReplicaConfig = config.replicas
        if rc is None:
            raise InvalidRequestError("ReplicaEngine needs engine_config.replicas", param="replicas")
        source = open_artifact(path)
        sha = await anyio.to_thread.run_sync(file_sha256, path)
        registry, spec = await anyio.to_thread.run_sync(_registry_entry, rc, sha)
        ref = ModelRef(sha256=sha, path=str(os.path.abspath(path)), registry=registry, registry_spec=spec)
        per_replica = replace(config, replicas=None, engines=1, threads=max(1, int(rc.cpus_per_replica)))
        async with connected(rc.address) as ray:
            remote = ray.remote(EngineReplica).options(num_cpus=rc.cpus_per_replica, max_restarts=-1)
            actors = [remote.remote(ref, per_replica, i) for i in range(rc.replicas)]
            try:
                infos = await _gather([a.start.remote() for a in actors])
                engine = cls(source, config, ray, actors)
                for i, info in enumerate(infos):
                    engine._update_load(i, info)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(engine._watch)
                    try:
                        yield engine
                    finally:
                        tg.cancel_scope.cancel()
            except ray.exceptions.RayTaskError as exc:
                raise _cause(exc, "a replica failed to start") from None
            finally:
                for a in actors:
                    ray.kill(a, no_restart=True)

    # -- generation ----------------------------------------------------------------------------

    async def generate(
        self, prompt_token_ids: list[int], params: SamplingParams | None = None, request_id: str | None = None
    ) -> AsyncIterator[TokenEvent | Finished]:
        params = params or SamplingParams()
        prompt = [int(t) for t in prompt_token_ids]
        if not prompt:
            raise InvalidRequestError("the prompt is empty", param="prompt")
        key = request_id or f"rep-{next(self._ids)}"
        hashes = prefix_hashes(prompt, self._block_size, params.adapter_key)
        tried: set[int] = set()
        while True:
            rid = self._pick(hashes, tried)
            stream = self._actors[rid].generate.options(num_returns="streaming").remote(prompt, params, key)
            self._router.record(hashes, rid)
            self._loads[rid].in_flight += 1
            self._live[key] = (rid, stream)
            num_tokens, done = 0, False
            try:
                async for ref in stream:
                    event, load = await ref
                    self._update_load(rid, load)
                    if isinstance(event, TokenEvent):
                        num_tokens += 1
                    done = isinstance(event, Finished)
                    yield event
                return
            except self._ray.exceptions.RayTaskError as exc:
                done = True
                raise _cause(exc, f"replica {rid} failed") from None
            except (self._ray.exceptions.RayActorError, self._ray.exceptions.ActorUnavailableError):
                done = True
                self._mark_dead(rid)
                if num_tokens == 0:
                    tried.add(rid)
                    self.num_failovers += 1
                    continue
                yield Finished("error", len(prompt), num_tokens, error=f"engine replica {rid} died mid-stream")
                return
            finally:
                self._loads[rid].in_flight -= 1
                if self._live.get(key, (None, None))[1] is stream:
                    del self._live[key]
                if not done:  # the caller left early (disconnect, cancellation): stop the replica's task
                    self._ray.cancel(stream)

    def _pick(self, hashes: list[int], tried: set[int]) -> int:
        candidates = [ld for ld in self._loads if ld.replica_id not in tried]
        rid = self._router.pick(hashes, candidates)
        if rid is not None:
            return rid
        if not any(ld.healthy for ld in candidates):
            raise OverloadedError("no engine replica is available (restarting); retry shortly")
        raise OverloadedError("every engine replica's queue is full; retry shortly")

    async def abort(self, request_id: str) -> bool:
        live = self._live.get(request_id)
        if live is None:
            return False
        return bool(await self._actors[live[0]].abort.remote(request_id))

    # -- embeddings, adapters, stats -----------------------------------------------------------

    async def embed(self, token_id_lists: list[list[int]], normalize: bool = True) -> Any:
        tried: set[int] = set()
        while True:
            rid = self._pick([], tried)
            try:
                return await self._actors[rid].embed.remote(token_id_lists, normalize)
            except self._ray.exceptions.RayTaskError as exc:
                raise _cause(exc, f"replica {rid} failed") from None
            except (self._ray.exceptions.RayActorError, self._ray.exceptions.ActorUnavailableError):
                self._mark_dead(rid)
                tried.add(rid)

    async def load_adapter(self, name: str, path: str, alpha: float = 1.0, global_: bool = False) -> Any:
        """On every live replica, acknowledged by each; replicas that restart later get it too."""
        infos = await self._broadcast(lambda a: a.load_adapter.remote(name, str(path), float(alpha), bool(global_)))
        self._adapters.loaded(name, str(path), float(alpha), bool(global_))
        return infos[0] if infos else None

    async def unload_adapter(self, name: str) -> None:
        await self._broadcast(lambda a: a.unload_adapter.remote(name))
        self._adapters.unloaded(name)

    async def scale_adapters(self, scales: dict[str, float]) -> None:
        """On every live replica; replicas that restart later get the scales after their adapters."""
        pairs = {str(n): float(s) for n, s in scales.items()}
        await self._broadcast(lambda a: a.scale_adapters.remote(pairs))
        self._adapters.scaled(pairs)

    async def slots(self) -> list[Any]:
        """Every live replica's slots, numbered one after the other (replica by replica)."""
        per = await self._broadcast(lambda a: a.slots.remote())
        flat = [s for slots in per for s in slots]
        return [replace(s, slot_id=i) for i, s in enumerate(flat)]

    def adapter_table(self) -> list[tuple[int, str, str, float]]:
        return self._adapters.describe()

    @property
    def context_length(self) -> int | None:
        """The most tokens one sequence may hold (prompt + output): --max-model-len, else the model's."""
        n = self.config.scheduler.max_model_len or (getattr(self.source, "config", None) or {}).get(
            "max_position_embeddings"
        )
        return int(n) if n else None

    @property
    def adapters(self) -> list[str]:
        return self._adapters.names

    async def _broadcast(self, call: Any) -> list[Any]:
        live = [i for i, ld in enumerate(self._loads) if ld.healthy]
        if not live:
            raise OverloadedError("no engine replica is available (restarting); retry shortly")
        try:
            return await _gather([call(self._actors[i]) for i in live])
        except self._ray.exceptions.RayTaskError as exc:
            raise _cause(exc, "a replica refused the change") from None

    def stats(self) -> dict[str, Any]:
        """Summed over live replicas, plus one row per replica (metrics and `modelc ps`)."""
        rows = []
        for ld, full in zip(self._loads, self._full_stats, strict=True):
            row = {k: int(full.get(k, 0)) for k in STATS_KEYS}
            row.update(running=ld.running, waiting=ld.waiting, kv_blocks_used=ld.kv_blocks_used)
            rows.append({"replica": ld.replica_id, "healthy": ld.healthy, "in_flight": ld.in_flight, **row})
        total = {k: sum(r[k] for r in rows if r["healthy"]) for k in STATS_KEYS}
        total["kv_blocks_total"] = sum(r["kv_blocks_total"] for r in rows)
        total.update(replicas=rows, replica_failovers=self.num_failovers, replica_deaths=self.num_replica_deaths)
        return total

    # -- health --------------------------------------------------------------------------------

    def _update_load(self, rid: int, load: dict[str, Any]) -> None:
        ld = self._loads[rid]
        for k in LOAD_KEYS:
            if k in load:
                setattr(ld, k, int(load[k]))

    def _mark_dead(self, rid: int) -> None:
        if self._loads[rid].healthy:
            self._loads[rid].healthy = False
            self.num_replica_deaths += 1
            self._router.forget_replica(rid)

    async def _watch(self) -> None:
        """Refresh live replicas' stats every second; bring each dead one back in its own task (a
        restart reloads the model, which can take minutes) so the others keep being watched."""
        rejoining: set[int] = set()
        async with anyio.create_task_group() as tg:
            while True:
                await anyio.sleep(WATCH_INTERVAL_S)
                for rid, actor in enumerate(self._actors):
                    if not self._loads[rid].healthy:
                        if rid not in rejoining:
                            rejoining.add(rid)
                            tg.start_soon(self._rejoin, rid, actor, rejoining)
                        continue
                    try:
                        with anyio.fail_after(10):
                            full = await actor.stats.remote()
                        self._full_stats[rid] = full
                        self._update_load(rid, full)
                    except (self._ray.exceptions.RayError, TimeoutError, ModelcError):
                        self._mark_dead(rid)

    async def _rejoin(self, rid: int, actor: Any, rejoining: set[int]) -> None:
        """Once Ray has restarted the actor: load the model, re-apply the adapters, rejoin routing.
        A failure leaves it dead; the watch loop tries again a second later."""
        try:
            with anyio.fail_after(600):  # a restarted replica loads the model again (and may compile)
                info = await actor.start.remote()
                for row in self._adapters.rows():
                    await actor.load_adapter.remote(row.name, row.path, row.alpha, row.global_)
                await actor.scale_adapters.remote(dict(self._adapters.global_scales))
            self._update_load(rid, info)
            self._loads[rid].healthy = True
        except (self._ray.exceptions.RayError, TimeoutError, ModelcError):
            await anyio.sleep(WATCH_INTERVAL_S)
        finally:
            rejoining.discard(rid)


def _registry_entry(rc: ReplicaConfig, sha: str) -> tuple[str | None, str | None]:
    """Where a node without the file pulls it: the configured spec, or the registry entry (the
    operator's --registry / MODELC_REGISTRY) whose SHA-256 is this very file's. None: shared path only."""
    from modelc import registry

    loc = rc.registry or os.environ.get("MODELC_REGISTRY")
    if rc.registry_spec or not loc:
        return loc, rc.registry_spec
    try:
        match = next((m for m in registry.load_index(loc) if m.sha256 == sha), None)
    except ModelcError:
        return None, None  # an unreachable registry: replicas need the shared path
    return (loc, f"{match.name}:{match.version}") if match else (None, None)


async def _gather(refs: list[Any]) -> list[Any]:
    return [await ref for ref in refs]


def _cause(exc: Any, what: str) -> BaseException:
    """The replica's own ModelcError (bad request, overloaded...) as is; anything else wrapped."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, ModelcError):
        return cause
    return EngineError(f"{what}: {type(cause or exc).__name__}: {cause or exc}")
