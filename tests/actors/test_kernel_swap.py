"""A cold start's swap to the compiled kernels (engine/warm.py) reaches a served engine as a message: the
warm-up thread tells SwapKernels, and the engine's own thread rebuilds the runner between two batches."""

from __future__ import annotations

import threading

import anyio
import pytest

from modelc.api.async_engine import AsyncEngine
from modelc.api.engine import Engine
from modelc.config import CacheConfig, EngineConfig, SchedulerConfig
from modelc.engine import warm
from modelc.engine.runner import Runner
from modelc.models.tiny import make_tiny_llama
from modelc.request import SamplingParams, TokenEvent

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_the_warm_up_swaps_a_served_runner_between_batches(anyio_backend, monkeypatch):
    monkeypatch.setattr(warm, "loaded_from_cache", lambda r: False)  # cold: served on the hybrid set at first
    monkeypatch.delenv(warm.COLD_START_ENV, raising=False)
    model = make_tiny_llama(4)
    greedy = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    want = list(Engine(model, kv_cache_tokens=256).generate_ids([3, 9, 27, 5], greedy))
    forwards = {"running": 0}
    swaps: list[tuple[str, int]] = []  # (thread, forwards running meanwhile)
    execute, rebuild = Runner.execute, Runner.rebuild_on_numba

    def counted(self, plan):
        forwards["running"] += 1
        try:
            return execute(self, plan)
        finally:
            forwards["running"] -= 1

    def watched(self):
        swaps.append((threading.current_thread().name, forwards["running"]))
        rebuild(self)

    monkeypatch.setattr(Runner, "execute", counted)
    monkeypatch.setattr(Runner, "rebuild_on_numba", watched)
    config = EngineConfig(threads=1, cpu_count=2, cache=CacheConfig(kv_cache_tokens=512),
                          scheduler=SchedulerConfig(max_num_seqs=4, max_batch_tokens=64))  # fmt: skip
    with anyio.fail_after(300):
        async with AsyncEngine.open(model, config) as eng:
            first = [ev.token_id async for ev in eng.generate([3, 9, 27, 5], greedy) if isinstance(ev, TokenEvent)]
            while warm.compiling():  # the warm-up thread compiles (or loads) on a second runner
                await anyio.sleep(0.05)
            await anyio.sleep(0.2)  # the engine handles SwapKernels from its inbox
            second = [ev.token_id async for ev in eng.generate([3, 9, 27, 5], greedy) if isinstance(ev, TokenEvent)]
    assert len(first) == 24 and second == want  # (first: partly on the reference kernels, same model)
    assert len(swaps) == 1, swaps
    thread, running = swaps[0]
    assert thread != "modelc-warmer" and running == 0  # the engine's thread, no forward meanwhile


def test_a_registered_owner_is_told_and_swaps_itself(monkeypatch):
    monkeypatch.setattr(warm, "loaded_from_cache", lambda r: False)
    monkeypatch.delenv(warm.COLD_START_ENV, raising=False)
    registered, warmup = threading.Event(), warm.warmup

    def held(runner, **kw):  # with every kernel cached (a kernel pack, a warm cache) the warmer can finish first
        registered.wait(60)
        return warmup(runner, **kw)

    monkeypatch.setattr(warm, "warmup", held)
    runner = warm.ready_runner(lambda kernels: Runner(make_tiny_llama(0), num_kv_blocks=4, kernels=kernels))
    assert runner.model.kernels.name == "hybrid"
    told: list[str] = []
    assert warm.deliver_swap(runner, lambda: told.append("swap"))  # registered while the warmer runs
    registered.set()
    for t in threading.enumerate():
        if t.name == "modelc-warmer":
            t.join(600)
    assert told == ["swap"] and runner.model.kernels.name == "hybrid"  # told, not swapped
    warm.swap_kernels(runner)
    assert runner.model.kernels.name == "numba"
    warm.swap_kernels(runner)  # a second one (a stale message) changes nothing
    assert not warm.deliver_swap(runner, lambda: None)  # nothing pending any more
