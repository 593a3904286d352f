"""EngineCore: one engine's step, schedule -> execute -> update (nano-vllm's LLMEngine.step, vLLM's
EngineCore.step), around one Scheduler and one Runner, and its one failure path.

`step()` runs the whole step in the calling thread: the sync Engine (api/engine.py), `modelc bench` and
tests drive a model with it. The actor shell (actors/scheduler.py) runs the same pieces with the forward
on an EngineActor: `schedule()` before it (also while earlier plans are still running: async scheduling,
scheduler/scheduler.py), `update()` after, `fail()` when it raised. Synchronous; owns no thread, no I/O.
"""

from __future__ import annotations

from typing import Any, Protocol

from modelc.scheduler.batch import BatchPlan, BatchResult
from modelc.scheduler.output import SeqEvent
from modelc.scheduler.scheduler import Scheduler
from modelc.scheduler.sequence import Sequence


class RunnerLike(Protocol):
    """What the step needs of an engine: modelc.engine.runner.Runner, or a fake in tests."""

    num_kv_blocks: int

    def execute(self, plan: BatchPlan) -> BatchResult: ...


def describe(exc: BaseException) -> str:
    """An exception as one line: `Type: first line of its message`."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class EngineCore:
    def __init__(self, scheduler: Scheduler, runner: RunnerLike | None = None) -> None:
        self.scheduler = scheduler
        self.runner = runner  # None: the forward runs elsewhere (an EngineActor); step() is not available

    # -- sequences -------------------------------------------------------------------------------

    def add(self, seq: Sequence) -> list[SeqEvent]:
        return self.scheduler.add(seq)

    def abort(self, seq_id: int) -> list[SeqEvent]:
        return self.scheduler.abort(seq_id)

    def abort_all(self) -> list[SeqEvent]:
        return self.scheduler.abort_all()

    def fail_adapter(self, adapter: str, error: str) -> list[SeqEvent]:
        return self.scheduler.fail_adapter(adapter, error)

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work

    @property
    def num_in_flight(self) -> int:
        """Plans scheduled and not yet updated (or failed)."""
        return self.scheduler.num_in_flight

    # -- the step ----------------------------------------------------------------------------------

    def schedule(self) -> tuple[BatchPlan | None, list[SeqEvent]]:
        """The first half of a step: the plan to run (None: nothing to compute now) and the sequences the
        scheduler ended meanwhile (one that outgrew the pool). With plans in flight, the plan after them."""
        return self.scheduler.schedule()

    def update(self, plan: BatchPlan, result: BatchResult) -> list[SeqEvent]:
        """The second half: apply the engine's result (tokens, stop rules, finished sequences)."""
        return self.scheduler.update(plan, result)

    def fail(self, plan: BatchPlan, error: str) -> list[SeqEvent]:
        """The forward of `plan` (the oldest in flight) raised: its sequences end with `error` (their blocks go
        back, nothing of the step enters the prefix cache), and the engine's pages and sampler states are gone
        (its runner is rebuilt): the plans after it are dropped and every other sequence recomputes."""
        events = self.update(plan, BatchResult(plan.step_id, (), error=error))
        return events + self.scheduler.reset_engine_state()

    def step(self) -> list[SeqEvent]:
        """One whole step in this thread: schedule, run the forward, update. [] when idle. An exception from
        the forward propagates, after fail() (the actors' failure path: its batch fails, the rest recomputes)."""
        assert self.runner is not None, "step() needs a runner; an actor shell runs the halves"
        plan, events = self.schedule()
        if plan is None:
            self.release()
            return events
        try:
            result = self.runner.execute(plan)
        except Exception as exc:
            self.fail(plan, describe(exc))
            raise
        return events + self.update(plan, result)

    def release(self) -> None:
        """Between steps: tell the runner now which ended sequences to forget (their sampler state, the
        mixed cache's hot pages), instead of with the next plan. For a caller that may not step again."""
        assert self.runner is not None
        plan = self.scheduler.release_plan()
        if plan is not None:
            self.runner.execute(plan)

    # -- what the shell asks -------------------------------------------------------------------------

    def queue_full(self) -> bool:
        return self.scheduler.queue_full()

    def cached_prefix_blocks(self, seq: Sequence) -> int:
        """Blocks of `seq`'s prompt this engine's prefix cache already holds (for engine affinity)."""
        return self.scheduler.num_cached_blocks(seq)

    def load(self) -> int:
        """Sequences waiting or running here."""
        return self.scheduler.num_sequences()

    def reset_prefix_cache(self) -> None:
        self.scheduler.reset_prefix_cache()

    def stats(self) -> dict[str, Any]:
        return self.scheduler.stats()

    def occupancy(self) -> tuple[int, int, int]:
        """(running, waiting, free KV blocks): the part of stats() an admission, an end or a new block moves."""
        s = self.scheduler
        return len(s.running), len(s.waiting), s.pool.num_free_blocks
