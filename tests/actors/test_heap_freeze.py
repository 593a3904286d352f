"""The supervisor settles the heap (engine/heap.py) when EngineConfig.freeze_heap asks: at the build of a runner on
compiled kernels, or at a cold start's flip (SwapKernels), and releases it when the engine ends."""

from __future__ import annotations

import dataclasses
import gc
from types import SimpleNamespace

import anyio
import pytest

from modelc.actors import engine as engine_actor
from modelc.actors.messages import Shutdown, SwapKernels
from modelc.actors.supervisor import Supervisor
from tests.actors.test_actors import cfg, greedy, run_tree
from tests.scheduler.fakes import FakeRunner

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize("freeze", [False, True])
async def test_a_runner_on_compiled_kernels_settles_the_heap_until_the_engine_ends(anyio_backend, freeze) -> None:
    config, kw = cfg()
    config = dataclasses.replace(config, freeze_heap=freeze)

    def make(engine_id: int) -> FakeRunner:
        runner = FakeRunner(**kw)
        runner.model = SimpleNamespace(kernels=SimpleNamespace(name="numba"))  # a warm cache's
        return runner

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            address = await tg.start(Supervisor(config, make).run)
            frozen = gc.get_freeze_count()
            await address.send(Shutdown())
    assert (frozen > 0) is freeze  # only where the config asks (a server's)
    assert gc.get_freeze_count() == 0  # released when the engine ended


async def test_the_flip_settles_the_heap_and_the_end_releases_it(anyio_backend, monkeypatch) -> None:
    config, kw = cfg()
    config = dataclasses.replace(config, freeze_heap=True)

    def flip(runner) -> None:
        runner.model = SimpleNamespace(kernels=SimpleNamespace(name="numba"))

    monkeypatch.setattr(engine_actor, "swap_kernels", flip)
    seen = []

    async def body(tree) -> None:
        tree.runners[0].model = SimpleNamespace(kernels=SimpleNamespace(name="hybrid"))
        inbox = tree.supervisor.scheduler_actor.engines[0].address
        await tree.collect([1, 2], greedy(2))
        seen.append(gc.get_freeze_count())  # on the hybrid set: not yet
        inbox.tell(SwapKernels())
        await tree.collect([1, 2], greedy(2))  # after the swap, handled between batches
        seen.append(gc.get_freeze_count())

    with anyio.fail_after(20):
        await run_tree(config, body, **kw)
    assert seen[0] == 0 and seen[1] > 0
    assert gc.get_freeze_count() == 0  # released when the engine ended
