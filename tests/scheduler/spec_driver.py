"""Drive a real Scheduler + Runner synchronously through an EngineCore (no actors): the speculative tests' loop."""

from __future__ import annotations

from collections.abc import Callable

from modelc.cache.block_pool import BlockPool
from modelc.config import SchedulerConfig
from modelc.engine.core import EngineCore
from modelc.engine.runner import Runner
from modelc.scheduler.output import SequenceFinished, TokenEmitted
from modelc.scheduler.scheduler import Scheduler
from modelc.scheduler.sequence import Sequence


def make_pair(src, *, blocks: int = 64, draft=None, **cfg) -> tuple[Runner, Scheduler]:
    runner = Runner(src, num_kv_blocks=blocks, draft_source=draft)
    return runner, Scheduler(SchedulerConfig(**cfg), BlockPool(blocks), debug=True)


def drive(
    runner: Runner,
    sched: Scheduler,
    seqs: list[Sequence],
    *,
    before_update: Callable[[Scheduler, object, int], None] | None = None,
) -> dict[int, list[int]]:
    """Run every sequence to its end; token ids per seq id (stop tokens included)."""
    core = EngineCore(sched, runner)
    outs: dict[int, list[int]] = {s.seq_id: [] for s in seqs}
    for s in seqs:
        core.add(s)
    step = 0
    while core.has_work:  # EngineCore.step(), split so a test can look between the forward and the update
        plan, _ = core.schedule()
        if plan is None:
            break
        res = runner.execute(plan)
        assert res.error is None, res.error
        if before_update is not None:
            before_update(sched, plan, step)
        for ev in core.update(plan, res):
            if isinstance(ev, TokenEmitted):
                outs[ev.seq_id].append(ev.token.token_id)
            else:
                assert isinstance(ev, SequenceFinished)
        step += 1
    core.release()  # the runner drops the ended sequences' state now, not with a next plan
    return outs
