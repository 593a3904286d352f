"""SchedulerActor: owns one EngineCore (a Scheduler and its BlockPool) per engine and the step loop.

It runs EngineCore's step split at the forward pass: it keeps each engine's next plans coming
(`core.schedule()` -> RunBatch) and applies each BatchDone with `core.update()` (or `core.fail()` after a
crashed forward), sending the events to the request side. Aborts, adapter swaps, embeddings and
shutdown are messages handled between steps. `handle` is synchronous and returns what to send; `run`
only receives and delivers. Nobody else touches its state: engines answer by mail.

NOTE: async scheduling. An engine holds up to 1 + LOOKAHEAD plans: the one it runs and the ones planned
after it before its result is known (scheduler/scheduler.py, plans in flight). So when a forward ends,
the engine's worker thread takes the next plan from its own inbox at once: a decode step waits for no
event-loop wake-up and no thread hand-off (on a busy machine each costs a scheduler slice, more than a
small model's forward; docs/benchmarks.md). The loop meanwhile applies the result that came back, routes
its tokens and plans the step after. A job that needs the engine idle (an embedding, an adapter swap,
shutdown) stops the planning ahead until its plans are back.

NOTE: this actor never waits on anyone but its own inbox, so its loop always drains it:
- an engine gets a plan only while it holds fewer than 1 + LOOKAHEAD, any other job only while idle,
  and its mailbox holds ENGINE_MAILBOX (supervisor.py) messages;
- request mailboxes hold max_tokens + 4, more than a sequence's events (accepted, tokens,
  finished, abort ack), and admin replies go to one-shot mailboxes that hold one;
so every delivery here is a tell() that cannot block. See docs/architecture.md, "Actor graph (H6)".
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import anyio

from modelc.actors.mailbox import Address, EngineInbox, Mailbox
from modelc.actors.messages import (
    AbortAcked,
    AbortSequence,
    AdapterLoaded,
    AdaptersScaled,
    AdapterUnloaded,
    AddSequence,
    BatchDone,
    DescribeSlots,
    Embed,
    Embedded,
    LoadAdapter,
    RunBatch,
    ScaleAdapters,
    SequenceAccepted,
    SequenceFinished,
    SequenceRejected,
    Shutdown,
    SlotsDescribed,
    UnloadAdapter,
)
from modelc.engine.core import EngineCore
from modelc.errors import EngineError, ModelcError, NotFoundError, OverloadedError
from modelc.scheduler.batch import BatchPlan
from modelc.scheduler.output import SeqEvent
from modelc.scheduler.sequence import Sequence
from modelc.scheduler.slots import SlotMap

Out = tuple[Address | EngineInbox, Any]
AdminMsg = LoadAdapter | UnloadAdapter | ScaleAdapters  # applied on every engine at once, all idle
LOOKAHEAD = 1  # plans an engine holds beyond the one it runs (vLLM's async scheduling: one)
STATS_EVERY_S = 0.02  # the stats snapshot's age at most while serving, when no count of it moved


@dataclass(slots=True)
class _AdminJob:
    """A LoadAdapter/UnloadAdapter/ScaleAdapters on its way through every engine."""

    msg: AdminMsg
    pending: set[int]
    info: Any = None
    error: BaseException | None = None


@dataclass(slots=True)
class _Engine:
    address: EngineInbox
    core: EngineCore  # runs no forward itself: the EngineActor at `address` does
    plans: deque[BatchPlan] = field(default_factory=deque)  # sent, not answered: the first one runs
    epoch: int = 0  # the engine's restarts seen: a plan sent with an older one comes back dropped
    dropped: int = 0  # plans sent before the last restart, still to come back (dropped unrun)
    job: bool = False  # an Embed or adapter job is outstanding
    embeds: dict[int, Embed] = field(default_factory=dict)
    slots: SlotMap | None = None  # which slot each running sequence holds, made on the first DescribeSlots

    @property
    def busy(self) -> bool:
        return bool(self.plans) or self.dropped > 0 or self.job


class SchedulerActor:
    def __init__(self, cores: list[EngineCore], engines: list[EngineInbox], inbox: Mailbox) -> None:
        assert len(cores) == len(engines) >= 1
        self.engines = [_Engine(a, c) for a, c in zip(engines, cores, strict=True)]
        self.inbox = inbox
        self.routes: dict[int, tuple[int, Address]] = {}  # seq id -> (engine index, reply_to)
        self.abort_waiters: dict[int, list[Address]] = {}
        self.embeds: deque[Embed] = deque()
        self.admin: deque[AdminMsg] = deque()
        self.admin_job: _AdminJob | None = None
        self.adapters: set[str] = set()  # loaded on every engine
        self.stopping = False
        self.stopped = False  # Shutdown has been sent to the engines
        self.engine_restarts = 0
        # read by AsyncEngine.stats(): refreshed by _publish before this actor waits for its next message
        self.snapshot: MappingProxyType = MappingProxyType(self._stats())
        self._occupancy = self._occupied()
        self._published_s = time.monotonic()

    async def run(self, *, task_status: anyio.abc.TaskStatus = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            with self.inbox:
                while not self.stopped:
                    try:
                        msg = await self.inbox.receive()
                    except anyio.EndOfStream:
                        msg = Shutdown("every sender is gone")
                    self._deliver(self.handle(msg))
                    if not self.inbox.queued():
                        self._publish()
                # Late arrivals get an answer, then the closed inbox turns further sends into errors.
                while True:
                    try:
                        msg = self.inbox.receive_nowait()
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                    self._deliver(self.handle(msg))
                self._publish(force=True)
        finally:
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

    def _deliver(self, outs: list[Out]) -> None:
        for address, msg in outs:
            address.tell(msg)

    def _occupied(self) -> list[tuple[int, int, int]]:
        return [eng.core.occupancy() for eng in self.engines]

    def _publish(self, *, force: bool = False) -> None:
        """Refresh the stats snapshot, before waiting for the next message (nobody reads it while this actor
        runs): at once when what it counts of sequences and KV blocks changed (an admission, an end, a block),
        else at most every STATS_EVERY_S while serving (spec-decode counters), so a decode step pays no dict
        of stats (docs/benchmarks.md, issue 40)."""
        occupancy = self._occupied()
        now = time.monotonic()
        if force or occupancy != self._occupancy or now - self._published_s >= STATS_EVERY_S:
            self.snapshot = MappingProxyType(self._stats())
            self._occupancy, self._published_s = occupancy, now

    # -- dispatch ------------------------------------------------------------------------------

    def handle(self, msg: object) -> list[Out]:
        """React to one message; return what to send (the engines' next jobs first: an engine waiting for
        its next plan gets it before the tokens go out). No awaits: atomic with respect to the inbox."""
        outs: list[Out] = []
        match msg:
            case BatchDone():  # first: every step's
                self._batch_done(msg, outs)
            case AddSequence():
                self._add(msg, outs)
            case AbortSequence():
                self._abort(msg, outs)
            case Embed():
                if self.stopping:
                    outs.append((msg.reply_to, Embedded(msg.request_id, -1, None, _stopping())))
                else:
                    self.embeds.append(msg)
            case Embedded():
                eng = self.engines[msg.engine_id]
                eng.job = False
                outs.append((eng.embeds.pop(msg.request_id).reply_to, msg))
            case LoadAdapter() | UnloadAdapter() | ScaleAdapters():
                if self.stopping:
                    outs.append((msg.reply_to, _admin_reply(msg, None, _stopping())))
                else:
                    self.admin.append(msg)
            case AdapterLoaded() | AdapterUnloaded() | AdaptersScaled():
                self._admin_done(msg, outs)
            case DescribeSlots():
                outs.append((msg.reply_to, SlotsDescribed(msg.request_id, self._describe_slots())))
            case Shutdown():
                self._shutdown(outs)
            case _:
                raise TypeError(f"SchedulerActor got an unknown message {type(msg).__name__}")
        jobs: list[Out] = []
        self._dispatch(jobs, outs)
        return jobs + outs

    def _dispatch(self, jobs: list[Out], outs: list[Out]) -> None:
        """Give every engine its next jobs: an adapter swap (all engines at once, when all are idle), an
        embedding (one idle engine), or its next plans (up to 1 + LOOKAHEAD held). Into `jobs` what goes to
        the engines, into `outs` the events the planning decided."""
        if self.stopped:
            return
        if self.stopping:
            if not any(e.busy for e in self.engines):
                jobs.extend((e.address, Shutdown()) for e in self.engines)
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
                eng.job = True
                jobs.append((eng.address, msg))
        if self.admin_job is not None:
            return
        for i, eng in enumerate(self.engines):
            if eng.job or eng.dropped:
                continue
            if self.embeds:  # an embedding waits: this engine plans nothing more until it is idle
                if not eng.plans:
                    job = self.embeds.popleft()
                    eng.embeds[job.request_id] = job
                    eng.job = True
                    jobs.append((eng.address, job))
                continue
            while len(eng.plans) <= LOOKAHEAD:
                plan, events = eng.core.schedule()
                self._route(events, outs)
                if plan is None:
                    break
                eng.plans.append(plan)
                jobs.append((eng.address, RunBatch(i, plan, eng.epoch)))

    # -- sequences -----------------------------------------------------------------------------

    def _add(self, msg: AddSequence, outs: list[Out]) -> None:
        seq = Sequence(msg.seq_id, list(msg.token_ids), msg.params)
        if self.stopping:
            outs.append((msg.reply_to, SequenceRejected(msg.seq_id, _stopping())))
            return
        if msg.seq_id in self.routes:
            outs.append((msg.reply_to, SequenceRejected(msg.seq_id, EngineError(f"duplicate seq id {msg.seq_id}"))))
            return
        missing = [name for name in msg.params.adapter_names if name not in self.adapters]
        if missing:
            error = NotFoundError(f"LoRA adapter {missing[0]!r} is not loaded", param="adapter")
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
        if msg.dropped:  # sent before the engine's last restart; the reset already requeued its sequences
            assert msg.epoch < eng.epoch and eng.dropped > 0
            eng.dropped -= 1
            return
        assert eng.plans and eng.plans[0] is msg.plan, "BatchDone for a plan this engine was not running"
        eng.plans.popleft()
        if not msg.engine_reset:
            self._route(eng.core.update(msg.plan, msg.result), outs)
            return
        # The forward raised: its batch fails, the runner is being rebuilt; the plans sent after it come
        # back dropped, and every other sequence recomputes on the new runner.
        self._route(eng.core.fail(msg.plan, msg.result.error or "the forward pass failed"), outs)
        eng.dropped, eng.epoch = len(eng.plans), eng.epoch + 1
        eng.plans.clear()
        self.engine_restarts += 1

    # -- adapters, shutdown, stats -------------------------------------------------------------

    def _admin_done(self, msg: AdapterLoaded | AdapterUnloaded | AdaptersScaled, outs: list[Out]) -> None:
        job = self.admin_job
        assert job is not None and job.msg.request_id == msg.request_id
        self.engines[msg.engine_id].job = False
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
            elif isinstance(job.msg, UnloadAdapter):
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

    def _describe_slots(self) -> tuple:
        out: list = []
        for i, eng in enumerate(self.engines):
            sched = eng.core.scheduler
            if eng.slots is None:
                eng.slots = SlotMap(i, sched.config.max_num_seqs)
            out.extend(eng.slots.describe(sched))
        return tuple(out)

    def _stats(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for eng in self.engines:
            for key, value in eng.core.stats().items():
                total[key] = total.get(key, 0) + value
        total["engines"] = len(self.engines)
        total["engine_restarts"] = self.engine_restarts
        return total


def _stopping() -> ModelcError:
    return OverloadedError("the engine is shutting down")


def _admin_reply(msg: AdminMsg, info: Any, error: BaseException | None) -> Any:
    if isinstance(msg, LoadAdapter):
        return AdapterLoaded(msg.request_id, -1, info=info, error=error)
    if isinstance(msg, ScaleAdapters):
        return AdaptersScaled(msg.request_id, -1, error=error)
    return AdapterUnloaded(msg.request_id, -1, error=error)
