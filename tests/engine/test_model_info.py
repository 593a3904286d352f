"""ModelInfo: one derivation of EOS ids, tokenizer, template and context length, shared by the front door
and the runner, so a grammar is compiled once, when the request arrives, never inside a batch step."""

from __future__ import annotations

import anyio
import pytest

from modelc.api.async_engine import AsyncEngine
from modelc.api.engine import Engine
from modelc.config import CacheConfig, EngineConfig
from modelc.engine import constraint as constraint_module
from modelc.engine.model_info import ModelInfo, eos_ids
from modelc.engine.runner import Runner
from modelc.models.tiny import make_tiny_llama, with_tokenizer
from modelc.request import Constraint, SamplingParams


def test_eos_ids_include_eot_and_eom_with_or_without_a_tokenizer():
    st = {"eos_token_ids": [2], "eot_token_id": 7, "eom_token_id": 9}
    assert eos_ids(st) == {2, 7, 9}
    model = with_tokenizer(make_tiny_llama(0))
    model.special_tokens.update(eot_token_id=7, eom_token_id=9)
    info = ModelInfo.of(model)
    assert {7, 9} <= info.eos_ids and info.tokenizer is not None
    bare = make_tiny_llama(0)
    bare.special_tokens.update(eom_token_id=9)
    assert 9 in ModelInfo.of(bare).eos_ids  # no tokenizer: the async path used to miss the eom id
    assert Runner(bare, num_kv_blocks=4).eos_ids == ModelInfo.of(bare).eos_ids


def _count_grammar_compiles(monkeypatch) -> list[bool]:
    """Each real grammar compile (a cache miss) appends whether it ran inside Runner.execute."""
    stepping = [False]
    compiles: list[bool] = []
    grammar_text = constraint_module._grammar_text
    execute = Runner.execute

    def counting(c):
        compiles.append(stepping[0])
        return grammar_text(c)

    def timed_execute(self, plan):
        stepping[0] = True
        try:
            return execute(self, plan)
        finally:
            stepping[0] = False

    monkeypatch.setattr(constraint_module, "_grammar_text", counting)
    monkeypatch.setattr(Runner, "execute", timed_execute)
    return compiles


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_served_grammar_is_compiled_once_outside_the_step(monkeypatch, anyio_backend):
    compiles = _count_grammar_compiles(monkeypatch)
    model = with_tokenizer(make_tiny_llama(1))
    params = SamplingParams(max_tokens=6, seed=1, constraint=Constraint("regex", "w(3|4|5)( w7)*"))
    config = EngineConfig(threads=1, cpu_count=2, warmup=False, cache=CacheConfig(kv_cache_tokens=256))
    with anyio.fail_after(120):
        async with AsyncEngine.open(model, config) as eng:
            events = [ev async for ev in eng.generate([1, 5, 17], params)]
    assert events[-1].finish_reason in ("stop", "length")
    assert compiles == [False]  # one compile, when generate() was called; the runner found it cached


def test_sync_engine_compiles_before_stepping(monkeypatch):
    compiles = _count_grammar_compiles(monkeypatch)
    eng = Engine(with_tokenizer(make_tiny_llama(1)), kv_cache_tokens=64)
    eng.generate([1, 5, 17], max_tokens=6, seed=1, constraint=Constraint("regex", "w(6|8)( w9)*"))
    eng.generate([1, 5, 18], max_tokens=6, seed=2, constraint=Constraint("regex", "w(6|8)( w9)*"))
    assert compiles == [False]  # compiled by the first request, before its first step; cached for the second
