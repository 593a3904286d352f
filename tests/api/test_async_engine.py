"""AsyncEngine on asyncio and trio: FakeRunner (fast, checks paging) and the real tiny llama."""

from __future__ import annotations

from contextlib import aclosing

import anyio
import numpy as np
import pytest
from anyio import wait_all_tasks_blocked

from modelc.api.async_engine import AsyncEngine
from modelc.cache.budget import DEFAULT_MIN_KV_TOKENS, default_context, kv_bytes_per_block, num_kv_blocks
from modelc.config import CacheConfig, EngineConfig, SchedulerConfig
from modelc.errors import EngineError, InvalidRequestError, NotFoundError, OverloadedError
from modelc.models.tiny import make_tiny_llama, reference_logits
from modelc.request import Finished, SamplingParams, TokenEvent
from modelc.tokenizer.tokenizer import Tokenizer
from tests.scheduler.fakes import FakeRunner, FakeSource, byte_tokenizer_json, greedy_alone

pytestmark = pytest.mark.anyio
VOCAB = 131  # FakeRunner emits ids 3..130: ASCII bytes of the byte tokenizer


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return request.param


def config(engines: int = 1, kv_tokens: int = 1024, **sched) -> EngineConfig:
    return EngineConfig(
        engines=engines,
        threads=1,
        cpu_count=2,
        cache=CacheConfig(kv_cache_tokens=kv_tokens),
        scheduler=SchedulerConfig(**sched),
        request_timeout_s=10,
    )


def fake_engine(cfg: EngineConfig, fail_first: tuple[int, ...] = ()):
    """An AsyncEngine opener over FakeRunners; the first runner built fails the calls in fail_first."""
    blocks = cfg.cache.kv_cache_tokens // 16 // cfg.engines
    runners: list[FakeRunner] = []

    def make(engine_id: int) -> FakeRunner:
        runners.append(FakeRunner(blocks, vocab_size=VOCAB, fail_calls=() if runners else fail_first))
        return runners[-1]

    src = FakeSource(tokenizer_json=byte_tokenizer_json())
    return AsyncEngine.open(src, cfg, runner_factory=make), runners


def greedy(n: int = 8, **kw) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=n, **kw)


async def collect(eng: AsyncEngine, prompt, params, **kw) -> tuple[list[TokenEvent], Finished]:
    evs = [ev async for ev in eng.generate(prompt, params, **kw)]
    assert isinstance(evs[-1], Finished) and all(isinstance(e, TokenEvent) for e in evs[:-1])
    return evs[:-1], evs[-1]


async def test_generate_text_usage_and_stats(anyio_backend) -> None:
    opener, _ = fake_engine(config())
    with anyio.fail_after(20):
        async with opener as eng:
            assert eng.name == "fake" and isinstance(eng.tokenizer, Tokenizer) and eng.chat_template is None
            prompt = eng.tokenizer.encode("hello world", add_special=False)
            toks, fin = await collect(eng, prompt, greedy(12, logprobs=True))
            ids = [t.token_id for t in toks]
            assert ids == greedy_alone(prompt, 12, VOCAB)
            assert "".join(t.text for t in toks) == eng.tokenizer.decode(ids)
            assert toks[0].logprob == -1.0
            assert fin == Finished("length", len(prompt), 12, 0)
            stats = eng.stats()
            assert {"running", "waiting", "kv_blocks_used", "kv_blocks_total", "prefix_queries", "prefix_hits",
                    "preemptions"} <= set(stats)  # fmt: skip
            assert stats["kv_blocks_total"] == 64 and stats["kv_blocks_used"] == 0
            assert eng.config.scheduler.eos_token_ids == (1,)


async def test_stop_string_is_cut_and_aborts(anyio_backend) -> None:
    opener, runners = fake_engine(config())
    with anyio.fail_after(20):
        async with opener as eng:
            prompt = eng.tokenizer.encode("abc", add_special=False)
            full = eng.tokenizer.decode(greedy_alone(prompt, 40, VOCAB))
            stop = full[10:13]
            toks, fin = await collect(eng, prompt, greedy(40, stop=(stop, "never-there")))
            assert "".join(t.text for t in toks) == full[: full.find(stop)]
            assert fin.finish_reason == "stop" and fin.completion_tokens < 40
            await wait_all_tasks_blocked()
            assert eng.stats()["running"] == 0 and eng.stats()["kv_blocks_used"] == 0


async def test_overloaded_at_first_step(anyio_backend) -> None:
    opener, _ = fake_engine(config(max_queue=0))
    with anyio.fail_after(20):
        async with opener as eng:
            with pytest.raises(OverloadedError):
                await eng.generate([5, 6], greedy()).__anext__()
            with pytest.raises(InvalidRequestError):
                await eng.generate([], greedy()).__anext__()


async def test_leaving_early_aborts(anyio_backend) -> None:
    opener, _ = fake_engine(config())
    with anyio.fail_after(20):
        async with opener as eng:
            async with aclosing(eng.generate([5] * 40, greedy(10000))) as stream:
                async for ev in stream:
                    if ev.token_id and len(ev.text) >= 0:
                        break
            await wait_all_tasks_blocked()
            assert eng.stats()["running"] == 0 and eng.stats()["kv_blocks_used"] == 0


async def test_plain_break_aborts_through_the_async_generator_hook(anyio_backend) -> None:
    opener, _ = fake_engine(config())
    with anyio.fail_after(20):
        async with opener as eng:
            async for _ in eng.generate([5] * 40, greedy(10000)):
                break  # no aclosing: the event loop's async-generator finalizer closes it
            # The finalizer runs on the loop's own schedule, and a step may be in a worker thread
            # (not a "blocked task"): poll until the abort has landed, bounded by fail_after.
            while not (eng.stats()["running"] == 0 and eng.stats()["kv_blocks_used"] == 0):
                await wait_all_tasks_blocked()
                await anyio.sleep(0.01)


async def test_abort_by_request_id(anyio_backend) -> None:
    opener, _ = fake_engine(config())
    with anyio.fail_after(20):
        async with opener as eng:
            n = 0
            async for ev in eng.generate([5] * 10, greedy(10000), request_id="r1"):
                if isinstance(ev, Finished):
                    assert ev.finish_reason == "abort" and ev.completion_tokens >= 2
                    break
                n += 1
                if n == 2:
                    assert await eng.abort("r1")
            assert not await eng.abort("r1")


async def test_sixteen_concurrent_equal_alone_across_two_engines(anyio_backend) -> None:
    opener, runners = fake_engine(config(engines=2, kv_tokens=256, max_batch_tokens=32, max_num_seqs=8))
    prompts = [[9] * 20 + [10 + i] * (3 + i) for i in range(16)]
    got: dict[int, list[int]] = {}
    with anyio.fail_after(60):
        async with opener as eng:

            async def one(i: int) -> None:
                got[i] = [t.token_id for t in (await collect(eng, prompts[i], greedy(12)))[0]]

            async with anyio.create_task_group() as tg:
                for i in range(16):
                    tg.start_soon(one, i)
            stats = eng.stats()
            assert stats["engines"] == 2 and stats["kv_blocks_used"] == 0 and stats["kv_blocks_total"] == 16
    assert got == {i: greedy_alone(p, 12, VOCAB) for i, p in enumerate(prompts)}
    assert all(r.num_calls > 0 for r in runners)


async def test_embed_and_adapters_reach_every_engine(anyio_backend) -> None:
    opener, runners = fake_engine(config(engines=2))
    with anyio.fail_after(20):
        async with opener as eng:
            vecs = await eng.embed([[3, 4, 5], [6]])
            assert vecs.shape == (2, 8) and np.allclose(np.linalg.norm(vecs, axis=1), 1)
            with pytest.raises(InvalidRequestError):
                await eng.embed([[]])
            await eng.load_adapter("ad", "some/path", alpha=0.5)
            assert all(r.adapters == {"ad": 0.5} for r in runners)
            assert eng.adapters == ["ad"]
            toks, _ = await collect(eng, [4] * 5, greedy(6, adapter="ad"))
            assert [t.token_id for t in toks] == greedy_alone([4] * 5, 6, VOCAB, salt="ad")
            # llama.cpp's global scales: a ScaleAdapters message through the scheduler to every engine
            await eng.scale_adapters({"ad": 2.0})
            assert all(r.global_scales == {"ad": 2.0} for r in runners)
            assert eng.adapter_table() == [(0, "ad", "some/path", 2.0)]
            with pytest.raises(EngineError, match="KeyError"):
                await eng.scale_adapters({"nope": 1.0})
            assert eng.adapter_table() == [(0, "ad", "some/path", 2.0)]
            await eng.unload_adapter("ad")
            assert all(r.adapters == {} for r in runners) and eng.adapter_table() == []
            with pytest.raises(EngineError, match="FileNotFoundError"):
                await eng.load_adapter("bad", "missing")
            assert eng.adapters == []


async def test_slots_describe_the_running_sequences(anyio_backend) -> None:
    """DescribeSlots: each engine's max_num_seqs slots from the scheduler's own state; a running sequence keeps
    its slot while it runs; idle slots carry no sequence."""
    opener, _ = fake_engine(config(engines=2, max_num_seqs=2))
    with anyio.fail_after(20):
        async with opener as eng:
            idle = await eng.slots()
            assert [s.slot_id for s in idle] == [0, 1, 2, 3] and [s.engine_id for s in idle] == [0, 0, 1, 1]
            assert not any(s.is_processing for s in idle)
            gen = eng.generate([4] * 5, greedy(100000))
            await gen.__anext__()
            await gen.__anext__()
            (busy,) = [s for s in await eng.slots() if s.is_processing]
            assert busy.num_prompt_tokens == 5 and busy.num_output_tokens >= 1 and busy.params.max_tokens == 100000
            again = [s for s in await eng.slots() if s.is_processing]
            assert [s.slot_id for s in again] == [busy.slot_id]  # the same slot while it runs
            await gen.aclose()


async def test_engine_crash_then_next_request_succeeds(anyio_backend) -> None:
    opener, runners = fake_engine(config(), fail_first=(1,))
    with anyio.fail_after(20):
        async with opener as eng:
            toks, fin = await collect(eng, [7] * 8, greedy(5))
            assert fin.finish_reason == "error" and "injected fault" in fin.error and len(toks) == 1
            toks, fin = await collect(eng, [7] * 8, greedy(5))
            assert fin.finish_reason == "length" and [t.token_id for t in toks] == greedy_alone([7] * 8, 5, VOCAB)
            assert eng.stats()["engine_restarts"] == 1 and len(runners) == 2


async def test_closed_engine_refuses(anyio_backend) -> None:
    opener, _ = fake_engine(config())
    with anyio.fail_after(20):
        async with opener as eng:
            pass
        with pytest.raises(EngineError):
            await collect(eng, [5], greedy())


def test_kv_budget_arithmetic() -> None:
    model_cfg = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}
    per_block = kv_bytes_per_block(model_cfg)
    assert per_block == 2 * 2 * 2 * 16 * 16 * 4
    assert num_kv_blocks(CacheConfig(kv_cache_tokens=100), model_cfg) == 7
    assert num_kv_blocks(CacheConfig(kv_cache_mb=1), model_cfg) == (1 << 20) // per_block
    assert num_kv_blocks(CacheConfig(), model_cfg, available_bytes=8 << 30) == (2 << 30) // per_block
    assert num_kv_blocks(CacheConfig(), model_cfg, available_bytes=1 << 30) == (1 << 28) // per_block
    # the automatic budget never exceeds what max_num_seqs full-length sequences could use
    assert num_kv_blocks(CacheConfig(), model_cfg, available_bytes=8 << 30, max_useful_tokens=64 * 1000) == 4000
    assert num_kv_blocks(CacheConfig(kv_cache_tokens=100), model_cfg, max_useful_tokens=16) == 7  # explicit wins
    with pytest.raises(InvalidRequestError):
        CacheConfig(kv_cache_mb=1, kv_cache_tokens=16)


def test_default_context_is_the_trained_one_capped_by_the_budget() -> None:
    per_block = 16 * 1024  # 1 KiB a token
    gib = 1 << 30
    # SmolLM2-like: 8192 trained tokens fit the budget; the cache holds them (and at least 4096)
    assert default_context(8192, None, per_block, available_bytes=8 * gib) == (8192, 8192)
    assert default_context(2048, None, per_block, available_bytes=8 * gib) == (2048, DEFAULT_MIN_KV_TOKENS)
    # a long trained context is cut to what 2 GiB (or a quarter of the free memory) holds
    assert default_context(1 << 22, None, per_block, available_bytes=8 * gib) == (2 * gib // 1024,) * 2
    assert default_context(1 << 22, None, per_block, available_bytes=gib) == (gib // 4 // 1024,) * 2
    assert default_context(None, None, per_block, available_bytes=gib) == (gib // 4 // 1024,) * 2
    # --ctx-size wins, past the budget too (the user asked for it)
    assert default_context(8192, 1000, per_block, available_bytes=8 * gib) == (1000, DEFAULT_MIN_KV_TOKENS)
    assert default_context(8192, 1 << 22, per_block, available_bytes=gib) == (1 << 22, 1 << 22)
    # a budget smaller than the minimum cache: the cache stays within it
    assert default_context(8192, None, per_block, available_bytes=8 << 20) == (2048, 2048)


@pytest.mark.parametrize("ctx_size", [None, 100])
async def test_the_context_sizes_the_kv_cache_where_no_budget_is_given(anyio_backend, ctx_size) -> None:
    """No --kv-cache-mb: the engine's context is --ctx-size (else the model's trained one) and its KV cache holds
    that many tokens, at least DEFAULT_MIN_KV_TOKENS; an f16 cache counts 2 bytes an element."""
    model = make_tiny_llama(3)
    trained = int(model.config["max_position_embeddings"])
    cfg = EngineConfig(scheduler=SchedulerConfig(max_model_len=ctx_size), warmup=False)
    with anyio.fail_after(60):
        async with AsyncEngine.open(model, cfg) as eng:
            want = ctx_size or trained
            assert eng.context_length == want
            assert eng.stats()["kv_blocks_total"] == max(want, DEFAULT_MIN_KV_TOKENS) // 16
            assert eng.config.cache.kv_dtype == "float32"  # a float model: f32 KV (auto)
    with pytest.raises(InvalidRequestError):
        EngineConfig(engines=2, threads=2, cpu_count=2)
    assert EngineConfig(engines=2, cpu_count=8).threads_per_engine == 4


# -- the real tiny llama through the default Runner -------------------------------------------------


def reference_greedy(model, prompt: list[int], n: int) -> list[int]:
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(np.argmax(reference_logits(model, ids)[-1])))
    return ids[len(prompt) :]


@pytest.mark.parametrize("kv_tokens,budget", [(1024, 512), (1024, 16), (160, 64)], ids=["plain", "chunked", "preempt"])
async def test_tiny_llama_concurrent_greedy_equals_reference(anyio_backend, kv_tokens, budget) -> None:
    model = make_tiny_llama(3)
    prompts = [[5, 9, 11, 40] * 5 + [20 + i] * (i % 6 + 1) for i in range(16)]
    expected = {i: reference_greedy(model, p, 16) for i, p in enumerate(prompts)}
    got: dict[int, list[int]] = {}
    cfg = config(kv_tokens=kv_tokens, max_batch_tokens=budget, max_num_seqs=8)
    with anyio.fail_after(120):
        async with AsyncEngine.open(model, cfg) as eng:

            async def one(i: int) -> None:
                toks, fin = await collect(eng, prompts[i], greedy(16, ignore_eos=True))
                got[i] = [t.token_id for t in toks]
                assert fin.finish_reason == "length"

            async with anyio.create_task_group() as tg:
                for i in range(16):
                    tg.start_soon(one, i)
            # again, one by one: served from the prefix cache, same tokens
            for i in (0, 3):
                toks, fin = await collect(eng, prompts[i], greedy(16, ignore_eos=True))
                assert [t.token_id for t in toks] == expected[i] and fin.cached_tokens >= 16
            stats = eng.stats()
            assert stats["kv_blocks_used"] == 0 and stats["prefix_hits"] > 0
            if kv_tokens == 160:
                assert stats["preemptions"] > 0
    assert got == expected


async def test_a_runner_that_cannot_start_raises_its_own_error(anyio_backend) -> None:
    def broken(engine_id: int):
        raise InvalidRequestError("kv_dtype must be one of ...")

    with anyio.fail_after(20):
        with pytest.raises(InvalidRequestError, match="kv_dtype"):
            async with AsyncEngine.open(FakeSource(), config(), runner_factory=broken):
                pass


async def test_caller_errors_leave_open_unwrapped(anyio_backend) -> None:
    opener, _ = fake_engine(config())
    with anyio.fail_after(20):
        with pytest.raises(KeyError):
            async with opener:
                raise KeyError("mine")


async def test_requests_that_would_fail_a_whole_batch_are_refused_alone(anyio_backend) -> None:
    """An out-of-vocabulary id or an unknown adapter is refused at once, before it reaches a batch;
    unloading an adapter ends only the sequences that use it."""
    cfg = config()
    src = FakeSource(config={"vocab_size": VOCAB}, tokenizer_json=byte_tokenizer_json())
    with anyio.fail_after(20):
        async with AsyncEngine.open(src, cfg, runner_factory=lambda i: FakeRunner(64, vocab_size=VOCAB)) as eng:
            with pytest.raises(InvalidRequestError, match="token ids"):
                await eng.generate([5, VOCAB], greedy()).__anext__()
            with pytest.raises(InvalidRequestError, match="logit_bias"):
                await eng.generate([5], greedy(logit_bias=((VOCAB + 1, 1.0),))).__anext__()
            with pytest.raises(NotFoundError, match="not loaded"):
                await eng.generate([5], greedy(adapter="nope")).__anext__()
            await eng.load_adapter("ad", "p")
            ends: dict[str, Finished] = {}
            started = anyio.Event()

            async def run(name: str, adapter: str | None) -> None:
                async for ev in eng.generate([6] * 5, greedy(100000, adapter=adapter)):
                    started.set()
                    if isinstance(ev, Finished):
                        ends[name] = ev
                        return
                    if name == "base" and "lora" in ends:
                        return

            async with anyio.create_task_group() as tg:
                tg.start_soon(run, "lora", "ad")
                tg.start_soon(run, "base", None)
                await started.wait()
                await eng.unload_adapter("ad")
            assert ends["lora"].finish_reason == "error" and "unloaded" in ends["lora"].error
            assert "base" not in ends  # kept going until the test left it


async def test_finished_reports_queue_time(anyio_backend) -> None:
    opener, _ = fake_engine(config())
    with anyio.fail_after(20):
        async with opener as eng:
            events = [ev async for ev in eng.generate([5] * 8, greedy(3))]
    fin = events[-1]
    assert isinstance(fin, Finished) and fin.finish_reason == "length"
    assert fin.queue_time_s is not None and 0.0 <= fin.queue_time_s < 20.0


async def test_kv_cache_smaller_than_the_context_ends_with_length_at_the_cache(anyio_backend) -> None:
    # --kv-cache of 32 tokens under the model's 2048: prompt + output stops at 32 (not 33), "length",
    # the same tokens as the sync Engine (which caps its context at its cache), and the cache is free after.
    from modelc.api.engine import Engine

    model = make_tiny_llama(3)
    prompt = [5, 9, 11, 40] * 5
    sync = list(Engine(model, kv_cache_tokens=32).generate_ids(prompt, greedy(100, ignore_eos=True)))
    assert len(sync) == 12
    with anyio.fail_after(120):
        async with AsyncEngine.open(model, config(kv_tokens=32)) as eng:
            assert eng.config.scheduler.max_model_len == 2048
            toks, fin = await collect(eng, prompt, greedy(100, ignore_eos=True))
            assert (fin.finish_reason, fin.prompt_tokens, fin.completion_tokens, fin.error) == ("length", 20, 12, None)
            assert [t.token_id for t in toks] == sync == reference_greedy(model, prompt, 12)
            assert eng.stats()["kv_blocks_used"] == 0
