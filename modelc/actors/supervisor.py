"""Supervisor: the root task group of one served model. Starts the engines, then the scheduler
(dependency order, through tg.start), and rebuilds an engine's runner after a crashed forward.

One-cancels-all: any other actor exception takes the whole group down loudly. Per-request
failures never reach here; they are events inside the request side.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
from anyio.abc import CapacityLimiter, TaskStatus

from modelc.actors.engine import EngineActor, EngineCrashed, RunnerLike
from modelc.actors.mailbox import Address, EngineInbox, open_mailbox
from modelc.actors.messages import SwapKernels
from modelc.actors.scheduler import LOOKAHEAD, SchedulerActor
from modelc.cache.block_pool import BlockPool
from modelc.config import EngineConfig
from modelc.engine.core import EngineCore
from modelc.engine.warm import deliver_swap
from modelc.scheduler.scheduler import Scheduler

SCHEDULER_MAILBOX = 64  # requests wait (backpressure) when it is full; the scheduler never does
# The plans an engine holds (the running one and LOOKAHEAD ahead) or one other job, and the warm-up's
# SwapKernels (one per runner: the one built now and, after a crash, the one before it)
ENGINE_MAILBOX = 1 + LOOKAHEAD + 2

RunnerFactory = Callable[[int], RunnerLike]  # engine id -> a fresh runner


async def supervise_engine(
    engine_id: int,
    make_runner: RunnerFactory,
    inbox: EngineInbox,
    scheduler: Address,
    limiter: CapacityLimiter,
    max_restarts: int,
    *,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Build the runner (in a thread), report its num_kv_blocks, serve; rebuild it after a crash."""

    def build() -> RunnerLike:
        runner = make_runner(engine_id)
        # a cold start serves on the reference kernels while numba compiles: the warm-up's swap to the
        # compiled ones reaches the engine as a message, handled between batches
        deliver_swap(runner, lambda: inbox.tell(SwapKernels()))
        return runner

    runner = await anyio.to_thread.run_sync(build, limiter=limiter)
    task_status.started(runner.num_kv_blocks)
    restarts = 0
    try:
        while True:
            try:
                await EngineActor(engine_id, runner, inbox, scheduler, limiter, epoch=restarts).run()
                return
            except EngineCrashed:
                restarts += 1
                if restarts > max_restarts:
                    raise
                fresh = await anyio.to_thread.run_sync(build, limiter=limiter)
                if fresh.num_kv_blocks != runner.num_kv_blocks:
                    raise RuntimeError(f"engine {engine_id} came back with a different KV size") from None
                runner = fresh
    finally:
        inbox.close()


class Supervisor:
    """`addr = await tg.start(Supervisor(config, make_runner).run)`: the scheduler's address."""

    def __init__(self, config: EngineConfig, make_runner: RunnerFactory) -> None:
        self.config = config
        self.make_runner = make_runner
        self.scheduler_actor: SchedulerActor | None = None

    async def run(self, *, task_status: TaskStatus[Address] = anyio.TASK_STATUS_IGNORED) -> None:
        cfg = self.config
        sched_address, sched_inbox = open_mailbox(SCHEDULER_MAILBOX)
        engine_boxes = [EngineInbox(ENGINE_MAILBOX) for _ in range(cfg.engines)]
        async with anyio.create_task_group() as tg:
            pools = []
            for i, inbox in enumerate(engine_boxes):
                num_blocks = await tg.start(
                    supervise_engine,
                    i,
                    self.make_runner,
                    inbox,
                    sched_address.clone(),
                    anyio.CapacityLimiter(1),
                    cfg.max_engine_restarts,
                )
                pools.append(
                    BlockPool(num_blocks, cfg.cache.block_size, enable_prefix_caching=cfg.cache.enable_prefix_caching)
                )
            cores = [EngineCore(Scheduler(cfg.scheduler, pool)) for pool in pools]
            self.scheduler_actor = SchedulerActor(cores, engine_boxes, sched_inbox)
            await tg.start(self.scheduler_actor.run)
            task_status.started(sched_address)
