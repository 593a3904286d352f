"""AsyncEngine: the Python API the server and load tests use to serve one model.

    async with AsyncEngine.open(source_or_path, config) as eng:
        async for ev in eng.generate(prompt_token_ids, params): ...

It starts the actor tree (supervisor -> engines, scheduler) in its own task group and talks to it
only by messages. No scheduling or model maths here.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import aclosing, asynccontextmanager
from dataclasses import replace
from typing import Any

import anyio
import numpy as np

from modelc.actors.engine import RunnerLike
from modelc.actors.mailbox import Address
from modelc.actors.messages import (
    AbortSequence,
    AdapterLoaded,
    AdaptersScaled,
    AdapterUnloaded,
    DescribeSlots,
    Embed,
    Embedded,
    LoadAdapter,
    ScaleAdapters,
    Shutdown,
    SlotsDescribed,
    UnloadAdapter,
)
from modelc.actors.request import RequestActor
from modelc.actors.supervisor import Supervisor
from modelc.cache.budget import default_context, kv_bytes_per_block, num_kv_blocks
from modelc.config import EngineConfig, resolve_kv_dtype
from modelc.engine.adapter_table import AdapterTable
from modelc.engine.model_info import ModelInfo
from modelc.engine.runner import Runner
from modelc.engine.warm import ready_runner
from modelc.errors import EngineError, InvalidRequestError, ModelcError
from modelc.models import residency
from modelc.request import Finished, SamplingParams, TokenEvent
from modelc.source import as_source

__all__ = ["AsyncEngine", "Finished", "TokenEvent"]


def _effective_config(config: EngineConfig, info: ModelInfo) -> EngineConfig:
    """Fill what the model knows: EOS ids and the context length."""
    sched = config.scheduler
    if not sched.eos_token_ids:
        sched = replace(sched, eos_token_ids=tuple(sorted(info.eos_ids)))
    if not info.context_shift_ok:
        sched = replace(sched, context_shift_ok=False)
    if info.rope_long_after:
        sched = replace(sched, rope_long_after=info.rope_long_after)
    return replace(config, scheduler=sched)


def _sized_context(config: EngineConfig, info: ModelInfo, model_config: dict[str, Any], draft: Any) -> EngineConfig:
    """The context (max_model_len: --ctx-size, else the model's trained context capped by the memory budget) and,
    where no MiB or token count sizes the KV cache, a cache sized by that context (cache/budget.default_context).
    The KV type is resolved by now, so the budget counts its real bytes."""
    cache, sched = config.cache, config.scheduler
    if cache.kv_cache_mb is not None or cache.kv_cache_tokens is not None:
        if sched.max_model_len is None and info.context_length:
            sched = replace(sched, max_model_len=info.context_length)
        return replace(config, scheduler=sched)
    per_block = kv_bytes_per_block(model_config, cache.block_size, cache.kv_dtype)
    if draft is not None:  # the draft's pages mirror the target's: the budget pays for both
        per_block += kv_bytes_per_block(getattr(draft, "config", {}) or {}, cache.block_size, cache.kv_dtype)
    context, tokens = default_context(info.context_length, sched.max_model_len, per_block, cache.block_size)
    return replace(config, scheduler=replace(sched, max_model_len=context),
                   cache=replace(cache, kv_cache_tokens=tokens * config.engines))  # fmt: skip


class AsyncEngine:
    """Serve one model. Build it with `AsyncEngine.open(...)`; every method talks to the actors."""

    serves: frozenset[str] = frozenset({"generate", "embed"})  # the server's contract (server/served.py)

    def __init__(
        self, source: Any, config: EngineConfig, info: ModelInfo, supervisor: Supervisor, scheduler: Address
    ) -> None:
        self.source = source
        self.config = config
        self.info = info
        self.name: str = info.name
        self.architecture: str = info.architecture
        self.tokenizer = info.tokenizer
        self.chat_template = info.chat_template
        self._supervisor = supervisor
        self._scheduler = scheduler
        self._seq_ids = itertools.count(1)
        self._request_ids = itertools.count(1)
        self._live: dict[str, int] = {}  # request id -> seq id, for abort()
        self._adapters = AdapterTable()  # stable ids, paths and the global scales (as the runners')
        self._closed = False
        self._vocab_size = info.vocab_size

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        source_or_path: Any,
        config: EngineConfig | None = None,
        *,
        runner_factory: Callable[[int], RunnerLike] | None = None,
    ) -> AsyncIterator[AsyncEngine]:
        """Load the model (a path, a store name or any model source), start the actors, yield the engine;
        on exit abort what is running and stop every actor. runner_factory(engine_id) replaces
        the default modelc.engine.runner.Runner (tests)."""
        source = as_source(source_or_path)
        info = ModelInfo.of(source)
        config = _effective_config(config or EngineConfig(), info)
        config = replace(config, cache=replace(config.cache, kv_dtype=resolve_kv_dtype(config.cache.kv_dtype, source)))
        draft = None
        if config.draft is not None and runner_factory is None:
            draft = as_source(config.draft)
            _check_draft(source, draft)
            config = replace(config, scheduler=replace(config.scheduler, speculative="draft"))
        config = _sized_context(config, info, getattr(source, "config", {}) or {}, draft)
        if runner_factory is None and config.replicas is None:  # replicas decide in their own processes
            config = _placed(config, source)
        make_runner = runner_factory or _default_runner_factory(source, config, info, draft)
        try:
            async with anyio.create_task_group() as tg:
                supervisor = Supervisor(config, make_runner)
                scheduler = await tg.start(supervisor.run)
                engine = cls(source, config, info, supervisor, scheduler)
                try:
                    yield engine
                finally:
                    with anyio.CancelScope(shield=True):
                        await engine._shutdown()
        except BaseExceptionGroup as group:
            raise _single(group) from None

    async def _shutdown(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                await self._scheduler.send(Shutdown())
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass

    # -- generation ----------------------------------------------------------------------------

    async def generate(
        self, prompt_token_ids: Sequence[int], params: SamplingParams | None = None, request_id: str | None = None
    ) -> AsyncIterator[TokenEvent | Finished]:
        """TokenEvents then one Finished. The first step raises OverloadedError when the queue is
        full. Leaving early (break + aclose, cancellation, disconnect) aborts the sequence."""
        params = params or SamplingParams()
        prompt = tuple(int(t) for t in prompt_token_ids)
        if not prompt:
            raise InvalidRequestError("the prompt is empty", param="prompt")
        # Checked here: a bad id reaching the runner would fail every sequence in its batch.
        vocab = self._vocab_size
        if vocab and not 0 <= min(prompt) <= max(prompt) < vocab:
            raise InvalidRequestError(f"prompt token ids must be in [0, {vocab})", param="prompt")
        if vocab and any(not 0 <= int(t) < vocab for t, _ in params.logit_bias):
            raise InvalidRequestError(f"logit_bias token ids must be in [0, {vocab})", param="logit_bias")
        if params.constraint is not None:  # compiled here, off the event loop: the runner finds it cached
            await anyio.to_thread.run_sync(self.info.compile, params.constraint)
        seq_id = next(self._seq_ids)
        key = request_id or f"seq-{seq_id}"
        actor = RequestActor(
            seq_id,
            prompt,
            params,
            self._scheduler,
            tokenizer=self.tokenizer,
            abort_timeout_s=self.config.request_timeout_s,
        )
        self._live[key] = seq_id
        try:
            async with aclosing(actor.events()) as events:  # closing this closes the actor's too
                async for ev in events:
                    if isinstance(ev, Finished):
                        self._forget(key, seq_id)
                    yield ev
        finally:
            self._forget(key, seq_id)

    def _forget(self, key: str, seq_id: int) -> None:
        if self._live.get(key) == seq_id:
            del self._live[key]

    async def abort(self, request_id: str) -> bool:
        """Abort a running generate() by its request_id; its iterator ends with Finished("abort")."""
        seq_id = self._live.get(request_id)
        if seq_id is None:
            return False
        await self._scheduler.send(AbortSequence(seq_id))
        return True

    # -- embeddings, adapters, stats -----------------------------------------------------------

    async def embed(self, token_id_lists: list[list[int]], normalize: bool = True) -> np.ndarray:
        """(S, C) float32 pooled, L2-normalized embeddings (pooled only with normalize=False), computed on an idle
        engine between steps."""
        lists = tuple(tuple(int(t) for t in ids) for ids in token_id_lists)
        if not lists or any(not ids for ids in lists):
            raise InvalidRequestError("every input needs at least one token", param="input")
        rid = next(self._request_ids)
        reply: Embedded = await self._scheduler.request(
            lambda r: Embed(rid, lists, r, bool(normalize)), timeout_s=self.config.request_timeout_s
        )
        _raise(reply.error, "embedding failed")
        return reply.vectors

    async def load_adapter(self, name: str, path: str, alpha: float = 1.0, global_: bool = False) -> Any:
        """Load a LoRA adapter on every engine between steps (no request sees half a swap)."""
        rid = next(self._request_ids)
        reply: AdapterLoaded = await self._scheduler.request(
            lambda r: LoadAdapter(rid, name, str(path), float(alpha), bool(global_), r),
            timeout_s=self.config.request_timeout_s,
        )
        _raise(reply.error, f"loading adapter {name!r} failed")
        self._adapters.loaded(name, str(path), float(alpha), bool(global_))
        return None if reply.info is None else dict(reply.info)

    async def unload_adapter(self, name: str) -> None:
        rid = next(self._request_ids)
        reply: AdapterUnloaded = await self._scheduler.request(
            lambda r: UnloadAdapter(rid, name, r), timeout_s=self.config.request_timeout_s
        )
        _raise(reply.error, f"unloading adapter {name!r} failed")
        self._adapters.unloaded(name)

    async def scale_adapters(self, scales: dict[str, float]) -> None:
        """Set the global scales (llama.cpp's): each named adapter's alpha multiplier for the requests naming no
        adapter; adapters not named (or at 0) no longer apply to them. Every engine between steps, as a load."""
        pairs = tuple((str(n), float(s)) for n, s in scales.items())
        rid = next(self._request_ids)
        reply: AdaptersScaled = await self._scheduler.request(
            lambda r: ScaleAdapters(rid, pairs, r), timeout_s=self.config.request_timeout_s
        )
        _raise(reply.error, "setting the adapters' scales failed")
        self._adapters.scaled(dict(pairs))

    async def slots(self) -> list[Any]:
        """modelc.scheduler.slots.SlotState of every engine's slots (max_num_seqs each), as the scheduler sees
        them between two steps (llama.cpp's GET /slots)."""
        rid = next(self._request_ids)
        reply: SlotsDescribed = await self._scheduler.request(
            lambda r: DescribeSlots(rid, r), timeout_s=self.config.request_timeout_s
        )
        return list(reply.slots)

    def adapter_table(self) -> list[tuple[int, str, str, float]]:
        """(id, name, path it was loaded from, global scale: 0 when it applies only to requests naming it) of each
        loaded adapter, in load order. An id stays the adapter's while it is loaded (engine/adapter_table.py)."""
        return self._adapters.describe()

    @property
    def context_length(self) -> int | None:
        """The most tokens one sequence may hold (prompt + output): --max-model-len, else the model's."""
        return self.config.scheduler.max_model_len

    @property
    def adapters(self) -> list[str]:
        """Names of the LoRA adapters loaded now, in load order."""
        return self._adapters.names

    def stats(self) -> dict[str, int]:
        """running, waiting, kv_blocks_used, kv_blocks_total, prefix_queries, prefix_hits,
        preemptions (summed over engines), engines, engine_restarts. Sequences and KV blocks as of the last
        message the scheduler handled; the other counters at most 20 ms older while it serves (actors/scheduler.py,
        SchedulerActor._publish)."""
        actor = self._supervisor.scheduler_actor
        return dict(actor.snapshot) if actor is not None else {}


def _single(group: BaseExceptionGroup) -> BaseException:
    """The one exception of a group of one (nested groups included), else the group itself: the
    caller's own exception leaves `async with AsyncEngine.open(...)` unwrapped."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _raise(error: BaseException | None, what: str) -> None:
    if error is None:
        return
    if isinstance(error, ModelcError):
        raise error
    raise EngineError(f"{what}: {type(error).__name__}: {error}") from error


def _check_draft(source: Any, draft: Any) -> None:
    """A draft must speak the target's tokens: the same tokenizer where both have one, else the same vocabulary."""
    t_text, d_text = getattr(source, "tokenizer_json", None), getattr(draft, "tokenizer_json", None)
    t_vocab = int((getattr(source, "config", None) or {}).get("vocab_size") or 0)
    d_vocab = int((getattr(draft, "config", None) or {}).get("vocab_size") or 0)
    if getattr(draft, "architecture", None) in ("bert", "mlp", "onnx"):
        raise InvalidRequestError("the draft model must be a text generation model", param="draft")
    if (t_text and d_text and t_text != d_text) or (not (t_text and d_text) and t_vocab != d_vocab):
        raise InvalidRequestError("the draft model does not share the target model's tokenizer", param="draft")


def _placed(config: EngineConfig, source: Any) -> EngineConfig:
    """Decide where the weights live, resident or streamed from the file (models/residency.py), with the KV cache
    this config sizes for all engines, and record it for the source: every runner built from it runs that way."""
    model_config = getattr(source, "config", {}) or {}
    context = config.scheduler.max_model_len or int(model_config.get("max_position_embeddings") or 0)
    useful = config.scheduler.max_num_seqs * context if context else None
    kv_bytes = num_kv_blocks(config.cache, model_config, max_useful_tokens=useful) * kv_bytes_per_block(
        model_config, config.cache.block_size, config.cache.kv_dtype
    )
    plan = residency.decide(source, config.weights, kv_bytes=kv_bytes, engines=config.engines)
    residency.assign(source, plan)
    return replace(config, weights=plan.mode)


def _default_runner_factory(
    source: Any, config: EngineConfig, info: ModelInfo, draft: Any = None
) -> Callable[[int], RunnerLike]:
    model_config = getattr(source, "config", {}) or {}
    context = config.scheduler.max_model_len or int(model_config.get("max_position_embeddings") or 0)
    useful = config.scheduler.max_num_seqs * context if context else None
    blocks = max(1, num_kv_blocks(config.cache, model_config, max_useful_tokens=useful) // config.engines)
    if draft is not None and config.cache.kv_cache_tokens is None:
        # The draft's pages mirror the target's block ids: split the byte budget over both.
        bs, dt = config.cache.block_size, config.cache.kv_dtype
        per_target = kv_bytes_per_block(model_config, bs, dt)
        per_draft = kv_bytes_per_block(getattr(draft, "config", {}) or {}, bs, dt)
        blocks = max(1, blocks * per_target // (per_target + per_draft))

    def build(kernels: Any = None) -> RunnerLike:
        return Runner(
            source,
            num_kv_blocks=blocks,
            kv_dtype=config.cache.kv_dtype,
            threads=config.threads_per_engine,
            draft_source=draft,
            kernels=kernels,
            info=info,
        )

    def make(engine_id: int) -> RunnerLike:
        if config.warmup:  # in the engine's thread, before open() yields: the first request compiles nothing
            return ready_runner(build, source, config.cache.kv_dtype, config.threads_per_engine)
        return build()

    return make
