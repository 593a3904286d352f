"""EngineCore: one engine's step, schedule -> execute -> update (nano-vllm's LLMEngine.step, vLLM's
EngineCore.step), around one Scheduler and one Runner.

`step()` runs the whole step in the calling thread: the sync Engine (api/engine.py), `modelc bench` and
tests drive a model with it. The actor shell (actors/scheduler.py) runs the same step split at the
forward pass, which an EngineActor runs on a worker thread: `schedule()` before it, `update()` after.
Synchronous; owns no thread and no I/O.
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

    # -- the step ----------------------------------------------------------------------------------

    def schedule(self) -> tuple[BatchPlan | None, list[SeqEvent]]:
        """The first half of a step: the plan to run (None: nothing to compute) and the events the
        scheduler decided meanwhile (a sequence that outgrew the pool)."""
        plan = self.scheduler.schedule()
        return plan, self.scheduler.take_events()

    def update(self, plan: BatchPlan, result: BatchResult) -> list[SeqEvent]:
        """The second half: apply the engine's result (tokens, stop rules, finished sequences)."""
        return self.scheduler.update(plan, result)

    def step(self) -> list[SeqEvent]:
        """One whole step in this thread: schedule, run the forward, update. [] when idle. An exception
        from the forward propagates, after the sequences of its batch are failed."""
        assert self.runner is not None, "step() needs a runner; an actor shell runs the halves"
        plan, events = self.schedule()
        if plan is None:
            self.release()
            return events
        try:
            result = self.runner.execute(plan)
        except Exception as exc:
            # The forward failed (a kernel raised): its sequences end with an error (their blocks go back,
            # nothing of this step enters the prefix cache) and the caller sees the exception. The actor
            # shell instead rebuilds the runner and has every other sequence recompute (actors/).
            self.update(plan, BatchResult(plan.step_id, (), error=f"{type(exc).__name__}: {exc}"))
            raise
        return events + self.update(plan, result)

    def release(self) -> None:
        """Between steps: tell the runner now which ended sequences to forget (their sampler state, the
        mixed cache's hot pages), instead of with the next plan. For a caller that may not step again."""
        assert self.runner is not None
        plan = self.scheduler.release_plan()
        if plan is not None:
            self.runner.execute(plan)

    def engine_reset(self) -> None:
        """The engine lost its state (a crashed forward, rebuilt): recompute every running sequence."""
        self.scheduler.reset_engine_state()

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
