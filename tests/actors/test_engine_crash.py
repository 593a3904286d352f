"""A kernel that raises inside a forward: the real Runner lets it propagate, the EngineActor reports the
batch failed, the supervisor rebuilds the runner and the scheduler has the other sequences recompute on it.
The production path, exercised with an injected kernel failure (no fake runner)."""

from __future__ import annotations

import anyio
import numpy as np
import pytest

from modelc.api.async_engine import AsyncEngine
from modelc.api.engine import Engine
from modelc.config import CacheConfig, EngineConfig, SchedulerConfig
from modelc.engine.runner import Runner
from modelc.kernels.elementwise import activation
from modelc.models.tiny import make_tiny_llama
from modelc.request import SamplingParams
from modelc.scheduler.batch import BatchPlan, SeqChunk


class KernelFault:
    """activation.silu_mul that raises once, on its `at`-th call after arm()."""

    def __init__(self) -> None:
        self.real = activation.silu_mul
        self.calls = 0
        self.armed = False
        self.raised = 0

    def arm(self) -> None:
        self.armed, self.calls = True, 0

    def __call__(self, *args):
        if self.armed:
            self.calls += 1
            if self.calls == 1:
                self.armed = False
                self.raised += 1
                raise FloatingPointError("injected kernel fault")
        return self.real(*args)


@pytest.fixture
def fault(monkeypatch) -> KernelFault:
    f = KernelFault()
    monkeypatch.setattr(activation, "silu_mul", f)  # kernel_set("numba") reads it when a runner is built
    return f


def test_the_runner_lets_a_kernel_failure_propagate(fault):
    runner = Runner(make_tiny_llama(0), num_kv_blocks=4)
    chunk = SeqChunk(
        1,
        np.array([1, 2, 3], np.int32),
        0,
        np.array([0], np.int32),
        True,
        SamplingParams(temperature=0.0),
        3,
        0,
        is_new=True,
    )
    fault.arm()
    with pytest.raises(FloatingPointError, match="injected"):
        runner.execute(BatchPlan(0, (chunk,)))


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_failed_forward_rebuilds_the_engine_and_the_others_recompute(fault, anyio_backend):
    model = make_tiny_llama(1)
    greedy = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    want = list(Engine(model, kv_cache_tokens=256).generate_ids([3, 9, 27, 5], greedy))
    config = EngineConfig(
        threads=1, cpu_count=2, warmup=False, max_engine_restarts=1, cache=CacheConfig(kv_cache_tokens=512),
        scheduler=SchedulerConfig(max_num_seqs=1, max_batch_tokens=64),  # one runs, the other waits
    )  # fmt: skip
    with anyio.fail_after(120):
        async with AsyncEngine.open(model, config) as eng:
            first: list = []
            second: list = []

            async def victim() -> None:
                async for ev in eng.generate(
                    [7, 1, 4], SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
                ):
                    first.append(ev)
                    if len(first) == 3:
                        fault.arm()  # the next forward raises inside the kernel

            async def bystander() -> None:
                await anyio.sleep(0.05)  # queued behind the victim (max_num_seqs=1)
                async for ev in eng.generate([3, 9, 27, 5], greedy):
                    second.append(ev)

            async with anyio.create_task_group() as tg:
                tg.start_soon(victim)
                tg.start_soon(bystander)
            stats = eng.stats()
    assert fault.raised == 1
    assert first[-1].finish_reason == "error" and "injected kernel fault" in first[-1].error
    assert second[-1].finish_reason == "length" and [e.token_id for e in second[:-1]] == want
    assert stats["engine_restarts"] == 1 and stats["kv_blocks_used"] == 0


def test_the_sync_engine_raises_and_serves_the_next_request(fault):
    eng = Engine(make_tiny_llama(2), kv_cache_tokens=128)
    greedy = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    want = list(eng.generate_ids([5, 6, 7], greedy))
    fault.arm()
    with pytest.raises(FloatingPointError, match="injected"):
        list(eng.generate_ids([5, 6, 7], greedy))
    assert list(eng.generate_ids([5, 6, 7], greedy)) == want
    assert eng.core.stats()["kv_blocks_used"] == 0 and not eng.core.has_work
