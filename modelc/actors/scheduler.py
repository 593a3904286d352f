"""SchedulerActor: owns one EngineCore (a Scheduler and its BlockPool) per engine and the step loop.

It runs EngineCore's step split at the forward pass: whenever an engine is idle and work exists it
takes that engine's next plan (`core.schedule()`) and sends RunBatch; BatchDone is applied with
`core.update()` and the events go to the request side. Aborts, adapter
swaps, embeddings and shutdown are messages handled between steps. `handle` is synchronous and
returns what to send; `run` only receives and delivers.

NOTE: this actor never waits on anyone but its own inbox, so its loop always drains it:
- engines get a message only while idle (nothing outstanding), and their mailbox holds one;
- request mailboxes hold max_tokens + 4, more than a sequence's events (accepted, tokens,
  finished, abort ack), and admin replies go to one-shot mailboxes that hold one;
so every delivery here is a tell() that cannot block. See docs/architecture.md, "Actor graph (H6)".

NOTE: the step continuation. A RunBatch carries `next_step`: the engine's worker thread calls it with
each finished plan and runs the plan it returns, so back-to-back steps (a decode) never wait for the
event loop to wake up (on a busy machine each wake-up costs a scheduler slice, more than a small
model's forward). `next_step` is BatchDone handled in that thread: `handle` runs under `lock` on both
sides, and every answer, from either thread, goes through one outbox that only the loop delivers, in
the order the lock saw them. The engine still gets nothing else while it runs (it is busy); a message
for it (Embed, an adapter job, Shutdown) ends the chain: next_step returns None and the engine reads it.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from modelc.actors.mailbox import Address
from modelc.actors.messages import (
    AbortAcked,
    AbortSequence,
    AdapterLoaded,
    AdapterUnloaded,
    AddSequence,
    BatchDone,
    Embed,
    Embedded,
    GetStats,
    LoadAdapter,
    RunBatch,
    SequenceAccepted,
    SequenceFinished,
    SequenceRejected,
    Shutdown,
    StatsReported,
    UnloadAdapter,
)
from modelc.engine.core import EngineCore
from modelc.errors import EngineError, ModelcError, NotFoundError, OverloadedError
from modelc.scheduler.batch import BatchPlan, BatchResult
from modelc.scheduler.output import SeqEvent
from modelc.scheduler.sequence import Sequence

Out = tuple[Address, Any]


@dataclass(slots=True)
class _AdminJob:
    """A LoadAdapter/UnloadAdapter on its way through every engine."""

    msg: LoadAdapter | UnloadAdapter
    pending: set[int]
    info: Any = None
    error: BaseException | None = None


@dataclass(slots=True)
class _Engine:
    address: Address
    core: EngineCore  # runs no forward itself: the EngineActor at `address` does
    busy: bool = False  # a RunBatch, Embed or adapter job is outstanding
    plan: BatchPlan | None = None
    embeds: dict[int, Embed] = field(default_factory=dict)


class SchedulerActor:
    def __init__(self, cores: list[EngineCore], engines: list[Address], inbox: MemoryObjectReceiveStream) -> None:
        assert len(cores) == len(engines) >= 1
        self.engines = [_Engine(a, c) for a, c in zip(engines, cores, strict=True)]
        self.inbox = inbox
        self.routes: dict[int, tuple[int, Address]] = {}  # seq id -> (engine index, reply_to)
        self.abort_waiters: dict[int, list[Address]] = {}
        self.embeds: deque[Embed] = deque()
        self.admin: deque[LoadAdapter | UnloadAdapter] = deque()
        self.admin_job: _AdminJob | None = None
        self.adapters: set[str] = set()  # loaded on every engine
        self.stopping = False
        self.stopped = False  # Shutdown has been sent to the engines
        self.engine_restarts = 0
        self.snapshot: MappingProxyType = MappingProxyType(self._stats())
        self.lock = threading.Lock()  # handle() from the loop and from an engine's next_step
        self._outbox: list[Out] = []  # answers in lock order, delivered by the loop (_flush)
        self._flush_posted = False
        self._post: Callable[[Callable[[], None]], None] | None = None  # run a callable on the loop, from a thread

    async def run(self, *, task_status: anyio.abc.TaskStatus = anyio.TASK_STATUS_IGNORED) -> None:
        self._post = _loop_poster()
        task_status.started()
        try:
            with self.inbox:
                while not self.stopped:
                    try:
                        msg = await self.inbox.receive()
                    except anyio.EndOfStream:
                        msg = Shutdown("every sender is gone")
                    self._receive(msg)
                # Late arrivals get an answer, then the closed inbox turns further sends into errors.
                while True:
                    try:
                        msg = self.inbox.receive_nowait()
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                    self._receive(msg)
        finally:
            with self.lock:
                self._post = None  # no more continuations: an engine still running answers by mail
                self._hang_up()

    def _hang_up(self) -> None:
        """Leaving for good (shutdown, or the tree is going down): close every reply address still
        waiting, so no request or admin call waits for an answer that cannot come."""
        waiting = [route[1] for route in self.routes.values()]
        waiting += [w for ws in self.abort_waiters.values() for w in ws]
        waiting += [job.reply_to for job in self.embeds] + [msg.reply_to for msg in self.admin]
        waiting += [job.reply_to for eng in self.engines for job in eng.embeds.values()]
        if self.admin_job is not None:
            waiting.append(self.admin_job.msg.reply_to)
        for address in waiting:
            address.close()

    def _receive(self, msg: object) -> None:
        with self.lock:
            self._outbox.extend(self.handle(msg))
        self._flush()

    def _flush(self) -> None:
        """On the loop: deliver every answer queued so far, in order."""
        with self.lock:
            outs, self._outbox, self._flush_posted = self._outbox, [], False
            self.snapshot = MappingProxyType(self._stats())
        for address, msg in outs:
            address.tell(msg)

    def next_step(self, engine_id: int, plan: BatchPlan, result: BatchResult) -> tuple[bool, BatchPlan | None]:
        """In engine `engine_id`'s worker thread: apply its finished plan (BatchDone) and return (True,
        the next plan it should run now or None: nothing to run, or another job for it waits in the
        outbox). (False, None) while shutting down: the engine answers BatchDone by mail, as without."""
        with self.lock:
            if self.stopping or self._post is None:
                # the loop must see the engines go idle (it sends them Shutdown), or this actor is gone
                return False, None
            outs = self.handle(BatchDone(engine_id, plan, result))
            nxt = None
            for k, (_, msg) in enumerate(outs):
                if isinstance(msg, RunBatch) and msg.engine_id == engine_id:
                    nxt = outs.pop(k)[1].plan
                    break
            self._outbox.extend(outs)
            post = not self._flush_posted
            self._flush_posted = True
            poster = self._post
        if post:
            poster(self._flush)
        return True, nxt

    # -- dispatch ------------------------------------------------------------------------------

    def handle(self, msg: object) -> list[Out]:
        """React to one message; return what to send. No awaits: atomic with respect to the inbox."""
        outs: list[Out] = []
        match msg:
            case AddSequence():
                self._add(msg, outs)
            case AbortSequence():
                self._abort(msg, outs)
            case BatchDone():
                self._batch_done(msg, outs)
            case Embed():
                if self.stopping:
                    outs.append((msg.reply_to, Embedded(msg.request_id, -1, None, _stopping())))
                else:
                    self.embeds.append(msg)
            case Embedded():
                eng = self.engines[msg.engine_id]
                eng.busy = False
                outs.append((eng.embeds.pop(msg.request_id).reply_to, msg))
            case LoadAdapter() | UnloadAdapter():
                if self.stopping:
                    outs.append((msg.reply_to, _admin_reply(msg, None, _stopping())))
                else:
                    self.admin.append(msg)
            case AdapterLoaded() | AdapterUnloaded():
                self._admin_done(msg, outs)
            case GetStats(reply_to=reply_to):
                outs.append((reply_to, StatsReported(MappingProxyType(self._stats()))))
            case Shutdown():
                self._shutdown(outs)
            case _:
                raise TypeError(f"SchedulerActor got an unknown message {type(msg).__name__}")
        self._dispatch(outs)
        return outs

    def _dispatch(self, outs: list[Out]) -> None:
        """Give every idle engine its next job: an adapter swap (all engines at once, when all are
        idle), an embedding, or the next step's plan."""
        if self.stopped:
            return
        if self.stopping:
            if not any(e.busy for e in self.engines):
                outs.extend((e.address, Shutdown()) for e in self.engines)
                self.stopped = True
            return
        if self.admin_job is None and self.admin:
            if any(e.busy for e in self.engines):
                return  # let every engine drain; start no new step meanwhile
            msg = self.admin.popleft()
            if isinstance(msg, UnloadAdapter):
                # Every engine is idle: end the adapter's sequences before its weights go away.
                error = f"LoRA adapter {msg.name!r} was unloaded"
                for eng in self.engines:
                    self._route(eng.core.fail_adapter(msg.name, error), outs)
            self.admin_job = _AdminJob(msg, set(range(len(self.engines))))
            for eng in self.engines:
                eng.busy = True
                outs.append((eng.address, msg))
        if self.admin_job is not None:
            return
        for i, eng in enumerate(self.engines):
            if eng.busy:
                continue
            if self.embeds:
                job = self.embeds.popleft()
                eng.embeds[job.request_id] = job
                eng.busy = True
                outs.append((eng.address, job))
                continue
            plan, events = eng.core.schedule()
            self._route(events, outs)
            if plan is not None:
                eng.busy, eng.plan = True, plan
                outs.append((eng.address, RunBatch(i, plan, self.next_step if self._post else None)))

    # -- sequences -----------------------------------------------------------------------------

    def _add(self, msg: AddSequence, outs: list[Out]) -> None:
        seq = Sequence(msg.seq_id, list(msg.token_ids), msg.params)
        if self.stopping:
            outs.append((msg.reply_to, SequenceRejected(msg.seq_id, _stopping())))
            return
        if msg.seq_id in self.routes:
            outs.append((msg.reply_to, SequenceRejected(msg.seq_id, EngineError(f"duplicate seq id {msg.seq_id}"))))
            return
        if seq.adapter is not None and seq.adapter not in self.adapters:
            error = NotFoundError(f"LoRA adapter {seq.adapter!r} is not loaded", param="adapter")
            outs.append((msg.reply_to, SequenceRejected(msg.seq_id, error)))
            return
        i = self._pick_engine(seq)
        try:
            events = self.engines[i].core.add(seq)
        except ModelcError as exc:
            outs.append((msg.reply_to, SequenceRejected(msg.seq_id, exc)))
            return
        self.routes[msg.seq_id] = (i, msg.reply_to)
        outs.append((msg.reply_to, SequenceAccepted(msg.seq_id)))
        self._route(events, outs)

    def _pick_engine(self, seq: Sequence) -> int:
        """Prefix affinity: the engine with the longest cached prefix, then the least loaded one."""
        if len(self.engines) == 1:
            return 0

        def score(i: int) -> tuple[bool, int, int]:
            core = self.engines[i].core
            return (core.queue_full(), -core.cached_prefix_blocks(seq), core.load())

        return min(range(len(self.engines)), key=score)

    def _abort(self, msg: AbortSequence, outs: list[Out]) -> None:
        route = self.routes.get(msg.seq_id)
        if route is None:
            if msg.reply_to is not None:
                outs.append((msg.reply_to, AbortAcked(msg.seq_id, None)))
            return
        if msg.reply_to is not None:
            self.abort_waiters.setdefault(msg.seq_id, []).append(msg.reply_to)
        self._route(self.engines[route[0]].core.abort(msg.seq_id), outs)

    def _route(self, events: list[SeqEvent], outs: list[Out]) -> None:
        for ev in events:
            route = self.routes.get(ev.seq_id)
            if route is None:
                continue
            outs.append((route[1], ev))
            if isinstance(ev, SequenceFinished) or ev.finish is not None:
                del self.routes[ev.seq_id]
                for waiter in self.abort_waiters.pop(ev.seq_id, ()):
                    outs.append((waiter, AbortAcked(ev.seq_id, ev.finish)))

    def _batch_done(self, msg: BatchDone, outs: list[Out]) -> None:
        eng = self.engines[msg.engine_id]
        assert eng.plan is msg.plan, "BatchDone for a plan this engine was not running"
        eng.busy, eng.plan = False, None
        self._route(eng.core.update(msg.plan, msg.result), outs)
        if msg.engine_reset:
            eng.core.engine_reset()
            self.engine_restarts += 1

    # -- adapters, shutdown, stats -------------------------------------------------------------

    def _admin_done(self, msg: AdapterLoaded | AdapterUnloaded, outs: list[Out]) -> None:
        job = self.admin_job
        assert job is not None and job.msg.request_id == msg.request_id
        self.engines[msg.engine_id].busy = False
        job.pending.discard(msg.engine_id)
        if msg.engine_id == 0 and isinstance(msg, AdapterLoaded):
            job.info = msg.info
        job.error = job.error or msg.error
        if job.pending:
            return
        self.admin_job = None
        if job.error is None:
            if isinstance(job.msg, LoadAdapter):
                self.adapters.add(job.msg.name)
            else:
                self.adapters.discard(job.msg.name)
        # The weights behind some cached pages may have changed (a reloaded or global adapter).
        for eng in self.engines:
            eng.core.reset_prefix_cache()
        outs.append((job.msg.reply_to, _admin_reply(job.msg, job.info, job.error)))

    def _shutdown(self, outs: list[Out]) -> None:
        if self.stopping:
            return
        self.stopping = True
        for eng in self.engines:
            self._route(eng.core.abort_all(), outs)
        for job in self.embeds:
            outs.append((job.reply_to, Embedded(job.request_id, -1, None, _stopping())))
        for msg in self.admin:
            outs.append((msg.reply_to, _admin_reply(msg, None, _stopping())))
        self.embeds.clear()
        self.admin.clear()

    def _stats(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for eng in self.engines:
            for key, value in eng.core.stats().items():
                total[key] = total.get(key, 0) + value
        total["engines"] = len(self.engines)
        total["engine_restarts"] = self.engine_restarts
        return total


def _loop_poster() -> Callable[[Callable[[], None]], None]:
    """A function that runs a callable soon on this event loop, called from any thread without waiting
    (anyio.from_thread waits for the result; the engine's thread must not)."""
    try:
        return asyncio.get_running_loop().call_soon_threadsafe
    except RuntimeError:  # no asyncio loop: trio (the actor core's tests run under it)
        import trio  # lazy: only under trio, a test dependency

        return trio.lowlevel.current_trio_token().run_sync_soon


def _stopping() -> ModelcError:
    return OverloadedError("the engine is shutting down")


def _admin_reply(msg: LoadAdapter | UnloadAdapter, info: Any, error: BaseException | None) -> Any:
    if isinstance(msg, LoadAdapter):
        return AdapterLoaded(msg.request_id, -1, info=info, error=error)
    return AdapterUnloaded(msg.request_id, -1, error=error)
