"""Speculative decoding through the actors (AsyncEngine on the real tiny llama with a draft): greedy
output equals plain output, several tokens per step reach the request side in order (stop strings
and max_tokens included), and cancelling streams mid-verification returns every KV block."""

from __future__ import annotations

from contextlib import aclosing

import anyio
import pytest

from modelc.api.async_engine import AsyncEngine
from modelc.config import CacheConfig, EngineConfig, SchedulerConfig
from modelc.request import Finished, SamplingParams, TokenEvent
from tests.server.tiny_model import make_served_model

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _config() -> EngineConfig:
    return EngineConfig(
        threads=1, cpu_count=2, cache=CacheConfig(kv_cache_tokens=2048), request_timeout_s=30,
        scheduler=SchedulerConfig(max_num_seqs=8, max_batch_tokens=64, spec_gamma=4), draft=make_served_model(0),
    )  # fmt: skip


async def _run(eng, prompt, params) -> tuple[list[int], str, Finished]:
    ids, text = [], ""
    async for ev in eng.generate(prompt, params):
        if isinstance(ev, Finished):
            return ids, text, ev
        ids.append(ev.token_id)
        text += ev.text
    raise AssertionError("no Finished")


async def test_speculative_through_the_actors():
    async with AsyncEngine.open(make_served_model(0), _config()) as eng:
        assert eng.config.scheduler.speculative == "draft"
        prompt = eng.tokenizer.encode("abcabcabcabc")
        plain = await _run(eng, prompt, SamplingParams(temperature=0.0, max_tokens=20, speculative=False))
        spec = await _run(eng, prompt, SamplingParams(temperature=0.0, max_tokens=20))
        assert spec[0] == plain[0] and spec[1] == plain[1] and spec[2].completion_tokens == 20
        assert eng.stats()["spec_decode_num_accepted_tokens"] > 0
        # a stop string inside a verified run: the text stops before it, finish "stop"
        stop = plain[1][5:8]
        assert len(stop) == 3
        cut = await _run(eng, prompt, SamplingParams(temperature=0.0, max_tokens=20, stop=(stop,)))
        assert cut[1] == plain[1][: plain[1].index(stop)] and cut[2].finish_reason == "stop"

        # eight streams, half of them cancelled after a few tokens, mid-verification
        async def one(i: int, cancel: bool) -> None:
            params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
            n = 0
            async with aclosing(eng.generate(eng.tokenizer.encode(f"{i}xyzxyzxyz{i}"), params)) as events:
                async for ev in events:
                    if isinstance(ev, TokenEvent):
                        n += 1
                        if cancel and n == 3:
                            break

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(one, i, i % 2 == 0)
        with anyio.fail_after(10):
            while eng.stats()["running"] or eng.stats()["waiting"]:
                await anyio.sleep(0.01)
        assert eng.stats()["kv_blocks_used"] == 0
