"""EngineActor: owns one Runner (weights, KV pages, sampler state) and runs it on its own worker thread, so
the event loop stays free. Answers everything to the scheduler. No scheduling here.

NOTE: the actor's loop runs on its worker thread (one `anyio.to_thread.run_sync` for the actor's life):
it takes each message from its EngineInbox, handles it there (a forward, an embedding, an adapter swap,
the warm-up's kernel swap) and posts the answer to the event loop without waiting, where it goes into the scheduler's mailbox (or,
when that is full, to the actor's relay task, which waits for room: the thread never does). The scheduler plans ahead, so when a forward ends the next plan is usually in the inbox already:
back-to-back steps need no event-loop wake-up and no thread hand-off (docs/benchmarks.md, "The step
continuation"; docs/architecture.md, "The path of one streamed token").

A forward that raises ends that batch with an error (BatchDone, engine_reset=True) and then the actor
raises EngineCrashed so the supervisor rebuilds the runner; the mailbox survives, so the scheduler's
address stays valid, and the plans it sent before it knew are answered `dropped` by the rebuilt actor
(their epoch is older).
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import Any, Protocol

import anyio
from anyio.abc import CapacityLimiter

from modelc.actors.mailbox import Address, EngineInbox, Mailbox, MailboxSender, loop_poster, open_mailbox
from modelc.actors.messages import (
    AdapterLoaded,
    AdaptersScaled,
    AdapterUnloaded,
    BatchDone,
    Embed,
    Embedded,
    LoadAdapter,
    RunBatch,
    ScaleAdapters,
    Shutdown,
    SwapKernels,
    UnloadAdapter,
)
from modelc.engine.core import describe
from modelc.engine.warm import swap_kernels
from modelc.scheduler.batch import BatchPlan, BatchResult

OUTBOX = 16  # answers posted by the thread, not yet relayed: at most one per message the inbox held


class RunnerLike(Protocol):
    num_kv_blocks: int

    def execute(self, plan: BatchPlan) -> BatchResult: ...
    def embed(self, token_id_lists: list[list[int]], normalize: bool = True) -> Any: ...
    def load_adapter(self, name: str, path: str, alpha: float = 1.0, *, global_: bool = False) -> Any: ...
    def unload_adapter(self, name: str) -> Any: ...
    def scale_adapters(self, scales: dict[str, float]) -> Any: ...


class EngineCrashed(Exception):
    """A forward pass raised; the runner's state can no longer be trusted."""


class EngineActor:
    def __init__(
        self,
        engine_id: int,
        runner: RunnerLike,
        inbox: EngineInbox,
        scheduler: Address,
        limiter: CapacityLimiter,
        epoch: int = 0,
    ) -> None:
        self.engine_id = engine_id
        self.runner = runner
        self.inbox = inbox
        self.scheduler = scheduler
        self.limiter = limiter
        self.epoch = epoch  # restarts before this runner: plans made for an older one are dropped unrun

    async def run(self) -> None:
        """Serve the inbox until Shutdown or until it is closed; EngineCrashed after a failed forward."""
        outbox, replies = open_mailbox(OUTBOX)
        answers = _Answers(self.scheduler, outbox.stream)
        post = loop_poster()
        crash: list[BaseException] = []
        serving = True
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._relay, answers, replies, lambda: serving)

            def reply(msg: object) -> None:  # on the worker thread: hand an answer to the loop, never waiting
                post(answers.deliver, msg)

            try:
                await anyio.to_thread.run_sync(self._serve, reply, crash, limiter=self.limiter)
            finally:
                serving = False
                post(outbox.close)  # after every answer posted before it: the relay sends them all, then ends
        if crash:
            raise EngineCrashed(describe(crash[0])) from crash[0]

    async def _relay(self, answers: _Answers, replies: Mailbox, serving: Callable[[], bool]) -> None:
        try:
            await answers.relay(replies)
        finally:
            if serving():  # cancelled (the tree is going down) while the thread waits on the inbox: wake it
                self.inbox.close()

    # -- the worker thread ---------------------------------------------------------------------------

    def _serve(self, reply: Callable[[object], None], crash: list[BaseException]) -> None:
        """The actor's loop, on its worker thread: receive, handle, answer. Returns on Shutdown, when the inbox
        is closed, or after a failed forward (the exception in `crash`)."""
        while True:
            try:
                msg = self.inbox.receive()
            except anyio.EndOfStream:
                return
            if isinstance(msg, Shutdown):
                return
            try:
                answer = self.handle(msg)
            except _ForwardFailed as failed:
                reply(failed.done)
                crash.append(failed.__cause__ or failed)
                return
            if answer is not None:
                reply(answer)

    def handle(self, msg: object) -> object | None:
        """One message, on the worker thread; returns the answer (None: none)."""
        match msg:
            case RunBatch(plan=plan, epoch=epoch):
                return self._run_batch(plan, epoch)
            case SwapKernels():
                swap_kernels(self.runner)
                return None
            case LoadAdapter(request_id=rid, name=name, path=path, alpha=alpha, global_=global_):
                try:
                    info = self.runner.load_adapter(name, path, alpha, global_=global_)
                except Exception as exc:
                    return AdapterLoaded(rid, self.engine_id, error=exc)
                return AdapterLoaded(rid, self.engine_id, info=None if info is None else MappingProxyType(dict(info)))
            case UnloadAdapter(request_id=rid, name=name):
                try:
                    self.runner.unload_adapter(name)
                    return AdapterUnloaded(rid, self.engine_id)
                except Exception as exc:
                    return AdapterUnloaded(rid, self.engine_id, error=exc)
            case ScaleAdapters(request_id=rid, scales=scales):
                try:
                    self.runner.scale_adapters(dict(scales))
                    return AdaptersScaled(rid, self.engine_id)
                except Exception as exc:
                    return AdaptersScaled(rid, self.engine_id, error=exc)
            case Embed(request_id=rid, token_id_lists=lists, normalize=normalize):
                try:
                    vectors = self.runner.embed([list(ids) for ids in lists], normalize=normalize)
                    vectors.flags.writeable = False
                    return Embedded(rid, self.engine_id, vectors)
                except Exception as exc:
                    return Embedded(rid, self.engine_id, None, error=exc)
        raise TypeError(f"EngineActor got an unknown message {type(msg).__name__}")

    def _run_batch(self, plan: BatchPlan, epoch: int) -> BatchDone:
        if epoch != self.epoch:  # planned for the runner before a crash: its sequences recompute
            return BatchDone(self.engine_id, plan, BatchResult(plan.step_id, ()), epoch, dropped=True)
        try:
            result = self.runner.execute(plan)
        except Exception as exc:
            error = f"engine {self.engine_id} failed in a forward pass: {describe(exc)}"
            failed = BatchResult(plan.step_id, (), error=error)
            raise _ForwardFailed(BatchDone(self.engine_id, plan, failed, epoch, engine_reset=True)) from exc
        return BatchDone(self.engine_id, plan, result, epoch)


class _ForwardFailed(Exception):
    """Inside the worker thread: a forward raised; `done` is the BatchDone that reports it."""

    def __init__(self, done: BatchDone) -> None:
        super().__init__(done.result.error)
        self.done = done


class _Answers:
    """On the loop: the engine thread's answers to the scheduler, in order. Each goes straight into the
    scheduler's mailbox when it has room and no answer waits before it; else to the relay task, which
    waits for room. (Dropped once the scheduler or the relay is gone: the tree is going down.)"""

    def __init__(self, scheduler: Address, outbox: MailboxSender) -> None:
        self.scheduler, self.outbox = scheduler, outbox
        self.relayed = 0  # answers handed to the relay and not yet in the scheduler's mailbox

    def deliver(self, msg: object) -> None:
        if not self.relayed:
            try:
                self.scheduler.stream.send_nowait(msg)
                return
            except anyio.WouldBlock:
                pass
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return
        self.relayed += 1
        try:
            self.outbox.send_nowait(msg)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass

    async def relay(self, replies: Mailbox) -> None:
        with replies:
            async for msg in replies:
                await self.scheduler.send(msg)
                self.relayed -= 1
