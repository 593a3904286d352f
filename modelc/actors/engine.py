"""EngineActor: owns one Runner (weights, KV pages, sampler state) and runs its calls in a worker
thread so the event loop stays free. Answers everything to the scheduler. No scheduling here.

A forward that raises ends that batch with an error (BatchDone, engine_reset=True) and then raises
EngineCrashed so the supervisor rebuilds the runner; the mailbox survives, so the scheduler's
address stays valid and nothing it sent is lost.
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

import anyio
from anyio.abc import CapacityLimiter
from anyio.streams.memory import MemoryObjectReceiveStream

from modelc.actors.mailbox import Address
from modelc.actors.messages import (
    AdapterLoaded,
    AdapterUnloaded,
    BatchDone,
    Embed,
    Embedded,
    LoadAdapter,
    RunBatch,
    Shutdown,
    UnloadAdapter,
)
from modelc.scheduler.batch import BatchPlan, BatchResult


class RunnerLike(Protocol):
    num_kv_blocks: int

    def execute(self, plan: BatchPlan) -> BatchResult: ...
    def embed(self, token_id_lists: list[list[int]]) -> Any: ...
    def load_adapter(self, name: str, path: str, alpha: float = 1.0, *, global_: bool = False) -> Any: ...
    def unload_adapter(self, name: str) -> Any: ...


class StepContinuationError(Exception):
    """The scheduler's step continuation raised in the engine's thread (a scheduler bug)."""


class EngineCrashed(Exception):
    """A forward pass raised; the runner's state can no longer be trusted."""


def describe(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class EngineActor:
    def __init__(
        self,
        engine_id: int,
        runner: RunnerLike,
        inbox: MemoryObjectReceiveStream,
        scheduler: Address,
        limiter: CapacityLimiter,
    ) -> None:
        self.engine_id = engine_id
        self.runner = runner
        self.inbox = inbox
        self.scheduler = scheduler
        self.limiter = limiter

    async def run(self) -> None:
        """Serve the inbox until Shutdown or until every sender is gone; EngineCrashed on a failed forward."""
        while True:
            try:
                msg = await self.inbox.receive()
            except anyio.EndOfStream:
                return
            if isinstance(msg, Shutdown):
                return
            reply = await self._handle(msg)
            if reply is not None:
                await self.scheduler.send(reply)

    def _steps(self, plan: BatchPlan, next_step: Any, running: list[BatchPlan]) -> BatchResult | None:
        """Worker thread: run `plan`; with a continuation, hand each result to the scheduler right here
        and run the plan it gives back, so a decode step costs no trip through the event loop and no
        thread wake-up (the loop delivers the tokens meanwhile). None: every result is applied."""
        while True:
            running[0] = plan
            result = self.runner.execute(plan)
            if next_step is None:
                return result
            try:
                applied, nxt = next_step(self.engine_id, plan, result)
            except Exception as exc:
                raise StepContinuationError(describe(exc)) from exc
            if not applied:
                return result
            if nxt is None:
                return None
            plan = nxt

    async def _call(self, fn: Any, *args: Any) -> Any:
        # abandon_on_cancel stays False: a step that is writing KV pages must finish.
        return await anyio.to_thread.run_sync(fn, *args, limiter=self.limiter)

    async def _handle(self, msg: object) -> object:
        match msg:
            case RunBatch(plan=plan, next_step=next_step):
                running = [plan]  # the plan in the forward now (a chained one, once the first is applied)
                try:
                    result = await self._call(self._steps, plan, next_step, running)
                except StepContinuationError:
                    raise  # the scheduler's own code failed, not the forward: not a crashed engine
                except Exception as exc:
                    plan = running[0]
                    error = f"engine {self.engine_id} failed in a forward pass: {describe(exc)}"
                    failed = BatchResult(plan.step_id, (), error=error)
                    await self.scheduler.send(BatchDone(self.engine_id, plan, failed, engine_reset=True))
                    raise EngineCrashed(error) from exc
                return None if result is None else BatchDone(self.engine_id, running[0], result)
            case LoadAdapter(request_id=rid, name=name, path=path, alpha=alpha, global_=global_):
                load = (
                    functools.partial(self.runner.load_adapter, global_=True) if global_ else self.runner.load_adapter
                )
                try:
                    return AdapterLoaded(rid, self.engine_id, info=await self._call(load, name, path, alpha))
                except Exception as exc:
                    return AdapterLoaded(rid, self.engine_id, error=exc)
            case UnloadAdapter(request_id=rid, name=name):
                try:
                    await self._call(self.runner.unload_adapter, name)
                    return AdapterUnloaded(rid, self.engine_id)
                except Exception as exc:
                    return AdapterUnloaded(rid, self.engine_id, error=exc)
            case Embed(request_id=rid, token_id_lists=lists):
                try:
                    vectors = await self._call(self.runner.embed, [list(ids) for ids in lists])
                    vectors.flags.writeable = False
                    return Embedded(rid, self.engine_id, vectors)
                except Exception as exc:
                    return Embedded(rid, self.engine_id, None, error=exc)
        raise TypeError(f"EngineActor got an unknown message {type(msg).__name__}")
