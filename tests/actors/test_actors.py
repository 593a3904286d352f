"""The actor core (supervisor -> engines, scheduler; request actors) on asyncio and trio, FakeRunner."""

from __future__ import annotations

import threading

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from modelc.actors.mailbox import MailboxFull, open_mailbox
from modelc.actors.messages import Shutdown
from modelc.actors.request import RequestActor, RequestState
from modelc.actors.supervisor import Supervisor
from modelc.config import EngineConfig, SchedulerConfig
from modelc.errors import InvalidRequestError, OverloadedError, RequestTimeoutError
from modelc.request import Finished, SamplingParams, TokenEvent
from modelc.tokenizer.stop import TextStream
from tests.scheduler.fakes import FakeRunner, greedy_alone

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return request.param


def greedy(max_tokens: int = 8, **kw) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, **kw)


class Tree:
    """A started supervisor with FakeRunners; runners[i] is engine i's latest runner."""

    def __init__(self, config: EngineConfig, **runner_kw) -> None:
        self.config = config
        self.runner_kw = runner_kw
        self.runners: dict[int, FakeRunner] = {}
        self.builds = 0
        self.supervisor = Supervisor(config, self.make)
        self.seq_ids = iter(range(1, 1 << 30))

    def make(self, engine_id: int) -> FakeRunner:
        kw = dict(self.runner_kw)
        if self.builds > 0:
            kw.pop("fail_calls", None)  # the rebuilt runner is healthy
        self.builds += 1
        self.runners[engine_id] = FakeRunner(**kw)
        return self.runners[engine_id]

    async def collect(self, prompt: list[int], params: SamplingParams) -> tuple[list[int], Finished]:
        actor = RequestActor(next(self.seq_ids), prompt, params, self.address)
        toks, fin = [], None
        async for ev in actor.events():
            if isinstance(ev, TokenEvent):
                toks.append(ev.token_id)
            else:
                fin = ev
        return toks, fin

    def stats(self) -> dict:
        return dict(self.supervisor.scheduler_actor.snapshot)

    async def settled(self, timeout_s: float = 10.0) -> dict:
        """The stats once nothing runs, waits or holds a KV block (or after timeout_s): a client that left
        frees its blocks through the scheduler and the engine's worker thread, and a task waiting on that
        thread counts as blocked for wait_all_tasks_blocked, so one wait does not see the end."""
        with anyio.move_on_after(timeout_s):
            while True:
                st = self.stats()
                if st["running"] == 0 and st["waiting"] == 0 and st["kv_blocks_used"] == 0:
                    break
                await anyio.sleep(0.01)
        return self.stats()


async def run_tree(config: EngineConfig, body, **runner_kw) -> Tree:
    tree = Tree(config, **runner_kw)
    async with anyio.create_task_group() as tg:
        tree.address = await tg.start(tree.supervisor.run)
        try:
            await body(tree)
        finally:
            await tree.address.send(Shutdown())
    return tree


def cfg(num_blocks: int = 64, **sched) -> tuple[EngineConfig, dict]:
    return EngineConfig(engines=1, threads=1, cpu_count=2, scheduler=SchedulerConfig(**sched)), {
        "num_kv_blocks": num_blocks
    }


async def test_one_request_streams_then_finishes(anyio_backend) -> None:
    config, kw = cfg()

    async def body(tree: Tree) -> None:
        toks, fin = await tree.collect(list(range(3, 23)), greedy(5))
        assert toks == greedy_alone(list(range(3, 23)), 5)
        assert fin == Finished("length", 20, 5, 0)
        assert tree.stats()["kv_blocks_used"] == 0

    with anyio.fail_after(20):
        await run_tree(config, body, **kw)


async def test_the_next_plan_waits_in_the_engines_inbox(anyio_backend, monkeypatch) -> None:
    """Async scheduling: while a forward runs, the scheduler plans the step after it (placeholder input),
    so the engine's thread finds its next plan queued when the forward ends: of a 20-token generation's
    20 plans none after the first is waited for, and every plan runs on the engine's one thread."""
    from modelc.actors.mailbox import EngineInbox
    from modelc.actors.messages import RunBatch

    queued: list[bool] = []  # per RunBatch taken: was it already in the inbox when the thread asked?
    receive = EngineInbox.receive

    def watching(self):
        ready = self._queue.qsize() > 0
        msg = receive(self)
        if isinstance(msg, RunBatch):
            queued.append(ready)
        return msg

    monkeypatch.setattr(EngineInbox, "receive", watching)
    threads: set[int] = set()
    config, kw = cfg()

    async def body(tree: Tree) -> None:
        runner = tree.runners[0]
        execute = runner.execute

        def slow(plan):  # a forward of 20 ms: time enough for the loop to plan the next step
            threads.add(threading.get_ident())
            threading.Event().wait(0.02)
            return execute(plan)

        runner.execute = slow
        toks, fin = await tree.collect(list(range(3, 23)), greedy(20))
        assert toks == greedy_alone(list(range(3, 23)), 20) and fin.finish_reason == "length"

    with anyio.fail_after(20):
        await run_tree(config, body, **kw)
    assert len(queued) == 20 and all(queued[1:]), queued  # (the first may be queued before the thread asks)
    assert len(threads) == 1 and threading.get_ident() not in threads


@pytest.mark.parametrize("num_blocks,budget", [(64, 512), (64, 16), (6, 64)], ids=["plain", "chunked", "preempt"])
async def test_concurrent_greedy_equals_alone(anyio_backend, num_blocks, budget) -> None:
    config, kw = cfg(num_blocks, max_batch_tokens=budget, max_num_seqs=16)
    prompts = [[7] * 16 + [i + 10] * (i + 3) for i in range(16)]
    results: dict[int, list[int]] = {}

    async def body(tree: Tree) -> None:
        async def one(i: int) -> None:
            results[i] = (await tree.collect(prompts[i], greedy(10)))[0]

        async with anyio.create_task_group() as tg:
            for i in range(16):
                tg.start_soon(one, i)
        stats = tree.stats()
        assert stats["kv_blocks_used"] == 0 and stats["running"] == 0
        if num_blocks == 6:
            assert stats["preemptions"] > 0
        else:
            assert stats["prefix_hits"] > 0

    with anyio.fail_after(60):
        await run_tree(config, body, **kw)
    assert results == {i: greedy_alone(p, 10) for i, p in enumerate(prompts)}


async def test_prefix_hit_gives_the_same_tokens(anyio_backend) -> None:
    config, kw = cfg()
    prompt = list(range(3, 43))

    async def body(tree: Tree) -> None:
        first, fin1 = await tree.collect(prompt, greedy(6))
        second, fin2 = await tree.collect(prompt, greedy(6))
        assert first == second == greedy_alone(prompt, 6)
        assert fin1.cached_tokens == 0 and fin2.cached_tokens == 32

    with anyio.fail_after(20):
        await run_tree(config, body, **kw)


async def test_a_request_actor_walks_its_states(anyio_backend) -> None:
    """NEW -> LIVE -> FINISHED for a whole generation; ENDED for one left early (its abort acked) and for
    one the scheduler refused; `state >= ENDED` is "the scheduler holds nothing of it"."""
    config, kw = cfg()

    async def body(tree: Tree) -> None:
        whole = RequestActor(1, [5] * 10, greedy(3), tree.address)
        assert whole.state is RequestState.NEW
        states = [whole.state async for _ in whole.events()]
        S = RequestState  # the last token comes with the scheduler's end; the caller then gets Finished
        assert states == [S.LIVE, S.LIVE, S.ENDED, S.FINISHED] and whole.state is S.FINISHED
        left = RequestActor(2, [6] * 10, greedy(50), tree.address)
        events = left.events()
        await anext(events)
        assert left.state is RequestState.LIVE
        await events.aclose()
        assert left.state is RequestState.ENDED
        refused = RequestActor(4, [], greedy(2), tree.address)
        with pytest.raises(InvalidRequestError, match="empty"):
            await anext(refused.events())
        assert refused.state is RequestState.ENDED and refused.state >= RequestState.ENDED

    with anyio.fail_after(20):
        await run_tree(config, body, **kw)


async def test_disconnect_aborts_and_frees_blocks(anyio_backend) -> None:
    config, kw = cfg()

    async def body(tree: Tree) -> None:
        got: list[int] = []
        with anyio.CancelScope() as scope:
            actor = RequestActor(1, list(range(3, 40)), greedy(1000), tree.address)
            async for ev in actor.events():
                got.append(ev.token_id)
                if len(got) == 3:
                    scope.cancel()  # the client went away
        assert len(got) == 3
        await wait_all_tasks_blocked()
        stats = await tree.settled()
        assert stats["running"] == 0 and stats["waiting"] == 0 and stats["kv_blocks_used"] == 0

    with anyio.fail_after(20):
        await run_tree(config, body, **kw)


async def test_abort_half_of_64_streams(anyio_backend) -> None:
    config, kw = cfg(48, max_num_seqs=64, max_queue=64)
    reasons: dict[int, str] = {}

    async def body(tree: Tree) -> None:
        async def one(i: int) -> None:
            actor = RequestActor(i + 1, [3 + i % 5] * 20 + [i + 3], greedy(30), tree.address)
            n = 0
            async for ev in actor.events():
                if isinstance(ev, Finished):
                    reasons[i] = ev.finish_reason
                    return
                n += 1
                if i % 2 and n == 1 + i % 4:
                    reasons[i] = "left"
                    return  # leaves the iterator early: its finally aborts

        async with anyio.create_task_group() as tg:
            for i in range(64):
                tg.start_soon(one, i)
        await wait_all_tasks_blocked()
        stats = await tree.settled()
        assert stats["kv_blocks_used"] == 0 and stats["running"] == 0 and stats["waiting"] == 0
        assert tree.runners[0].states == set() or all(s > 0 for s in tree.runners[0].states)

    with anyio.fail_after(60):
        await run_tree(config, body, **kw)
    assert sorted(reasons) == list(range(64))
    assert {reasons[i] for i in range(0, 64, 2)} == {"length"}
    assert {reasons[i] for i in range(1, 64, 2)} == {"left"}


async def test_engine_crash_fails_that_batch_only(anyio_backend) -> None:
    config, kw = cfg()
    kw["fail_calls"] = (3,)  # the 4th forward of the first runner raises

    async def body(tree: Tree) -> None:
        toks, fin = await tree.collect(list(range(3, 23)), greedy(10))
        assert fin.finish_reason == "error" and "injected fault" in fin.error and "engine 0" in fin.error
        assert len(toks) == 3
        toks, fin = await tree.collect(list(range(3, 23)), greedy(4))  # the rebuilt engine serves
        assert fin.finish_reason == "length" and toks == greedy_alone(list(range(3, 23)), 4)
        assert tree.stats()["engine_restarts"] == 1 and tree.builds == 2

    with anyio.fail_after(20):
        await run_tree(config, body, **kw)


async def test_engine_crash_recomputes_the_other_sequences(anyio_backend) -> None:
    """b (priority 0) takes the whole budget in call 3, which crashes: b fails; a, running but not in
    that batch (calls: 0 a's prefill, 1 a's decode planned ahead, 2 a + b's first chunk, 3 b alone, 4 b
    alone planned ahead and dropped), lost its KV with the runner and is recomputed on the rebuilt one."""
    config, kw = cfg(max_batch_tokens=20, max_num_seqs=4)
    gate = threading.Event()
    kw.update(fail_calls=(3,), gate=gate)
    out: dict[str, tuple[list[int], Finished]] = {}
    prompt_a, prompt_b = list(range(3, 13)), list(range(50, 110))

    async def body(tree: Tree) -> None:
        async def run(name: str, prompt: list[int], priority: int) -> None:
            out[name] = await tree.collect(prompt, greedy(6, priority=priority))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "a", prompt_a, 1)
            await wait_all_tasks_blocked()  # call 0 (a's prefill) waits on the gate
            tg.start_soon(run, "b", prompt_b, 0)
            await wait_all_tasks_blocked()
            gate.set()

    with anyio.fail_after(20):
        tree = await run_tree(config, body, **kw)
    assert tree.builds == 2
    assert out["b"][1].finish_reason == "error" and out["b"][0] == []
    assert out["a"][1].finish_reason == "length" and out["a"][0] == greedy_alone(prompt_a, 6)
    assert tree.stats()["engine_restarts"] == 1


async def test_queue_full_is_rejected_at_once(anyio_backend) -> None:
    config, kw = cfg(max_num_seqs=1, max_queue=1, max_batch_tokens=64)
    gate = threading.Event()
    kw["gate"] = gate

    async def body(tree: Tree) -> None:
        async with anyio.create_task_group() as tg:
            for i in range(2):
                tg.start_soon(tree.collect, [3 + i] * 5, greedy(2))
            await wait_all_tasks_blocked()  # one running (engine blocked), one waiting
            with pytest.raises(OverloadedError):
                await tree.collect([9] * 5, greedy(2))
            gate.set()

    with anyio.fail_after(20):
        await run_tree(config, body, **kw)


async def test_shutdown_aborts_live_requests(anyio_backend) -> None:
    config, kw = cfg()
    got: list = []
    three = anyio.Event()

    async def consume(tree: Tree) -> None:
        async for ev in RequestActor(1, [5] * 10, greedy(100000), tree.address).events():
            got.append(ev)
            if len(got) == 3:
                three.set()

    tree = Tree(config, **kw)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as outer:
            async with anyio.create_task_group() as tg:
                tree.address = await tg.start(tree.supervisor.run)
                outer.start_soon(consume, tree)
                await three.wait()
                await tree.address.send(Shutdown())
    assert isinstance(got[-1], Finished) and got[-1].finish_reason == "abort"
    with pytest.raises(Exception, match="not running"):
        await tree.collect([5] * 3, greedy(2))


async def test_mailbox_tell_and_request_timeout(anyio_backend) -> None:
    address, inbox = open_mailbox(1)
    with inbox:
        assert address.tell("a")
        with pytest.raises(MailboxFull):
            address.tell("b")
        assert inbox.receive_nowait() == "a"
        with pytest.raises(RequestTimeoutError):
            await address.request(lambda reply_to: ("ping", reply_to), timeout_s=0.05)  # nobody answers
    assert not address.tell("c")  # receiver gone
    with pytest.raises(ValueError):
        open_mailbox(0)


def test_text_stream_holds_back_possible_stop_strings() -> None:
    class Tok:  # one character per token id
        def decode(self, ids, skip_special=True):
            return "".join(chr(i) for i in ids)

        def token_bytes(self, i):
            return chr(i).encode()

    ts = TextStream(Tok(), [], ("END",))
    out = [ts.add(ord(c)) for c in "abEN"]
    assert out == ["a", "b", "", ""] and not ts.stopped
    assert ts.add(ord("x")) == "ENx"
    assert [ts.add(ord(c)) for c in "yEND"] == ["y", "", "", ""] and ts.stopped
    assert ts.flush() == ""
    ts = TextStream(Tok(), [], ("END",))
    ts.add(ord("E"))
    assert ts.flush() == "E"  # a natural end releases what was held


async def test_tree_going_down_hangs_up_on_waiting_requests(anyio_backend) -> None:
    """More crashes than max_engine_restarts take the tree down loudly; no request is left hanging."""
    config = EngineConfig(
        engines=1, threads=1, cpu_count=2, max_engine_restarts=0, scheduler=SchedulerConfig(max_num_seqs=1)
    )
    gate = threading.Event()
    tree = Tree(config, num_kv_blocks=64, fail_calls=(1,), gate=gate)
    results: dict[str, object] = {}

    async def run(name: str, prompt: list[int]) -> None:
        try:
            results[name] = (await tree.collect(prompt, greedy(5)))[1]
        except Exception as exc:
            results[name] = exc

    with anyio.fail_after(20):
        async with anyio.create_task_group() as outer:
            with pytest.raises(Exception) as info:
                async with anyio.create_task_group() as tg:
                    tree.address = await tg.start(tree.supervisor.run)
                    outer.start_soon(run, "a", [3] * 5)
                    await wait_all_tasks_blocked()
                    outer.start_soon(run, "b", [4] * 5)  # waits behind a (max_num_seqs=1)
                    await wait_all_tasks_blocked()
                    gate.set()
                    await anyio.sleep_forever()
    assert "EngineCrashed" in repr(info.value)
    assert isinstance(results["a"], Finished) and results["a"].finish_reason == "error"
    assert type(results["b"]).__name__ == "EngineError"


def test_text_stream_skips_stop_strings_before_min_tokens() -> None:
    class Tok:
        def decode(self, ids, skip_special=True):
            return "".join(chr(i) for i in ids)

        def token_bytes(self, i):
            return chr(i).encode()

    ts = TextStream(Tok(), [], ("E",))
    assert ts.add(ord("E"), check_stop=False) == "E" and not ts.stopped
    assert ts.add(ord("E")) == "" and ts.stopped


@pytest.mark.parametrize("seed", [0, 1])
async def test_random_mix_of_requests_aborts_and_priorities(anyio_backend, seed) -> None:
    """Many requests, random lengths/priorities/early exits, a pool small enough to preempt: every
    request ends exactly once, finished ones equal their run alone, and every block comes back."""
    import random

    rng = random.Random(seed)
    config, kw = cfg(10, max_batch_tokens=24, max_num_seqs=6, max_queue=100)
    specs = [
        (rng.choice([3, 5, 7]), rng.randint(1, 40), rng.randint(1, 20), rng.randint(0, 2), rng.random() < 0.3)
        for _ in range(40)
    ]
    ends: dict[int, list] = {i: [] for i in range(len(specs))}

    async def body(tree: Tree) -> None:
        async def one(i: int) -> None:
            fam, n, m, prio, leave = specs[i]
            prompt = [fam] * 16 + [fam + i] * n
            actor = RequestActor(i + 1, prompt, greedy(m, priority=prio), tree.address)
            toks = []
            async for ev in actor.events():
                if isinstance(ev, Finished):
                    ends[i].append((ev.finish_reason, toks))
                    return
                toks.append(ev.token_id)
                if leave and len(toks) == 2:
                    ends[i].append(("left", toks))
                    return
            ends[i].append(("no-finish", toks))

        async with anyio.create_task_group() as tg:
            for i in range(len(specs)):
                tg.start_soon(one, i)
                if rng.random() < 0.3:
                    await wait_all_tasks_blocked()
        await wait_all_tasks_blocked()
        stats = await tree.settled()
        assert stats["kv_blocks_used"] == 0 and stats["running"] == 0 and stats["waiting"] == 0
        assert stats["preemptions"] > 0 and stats["prefix_hits"] > 0

    with anyio.fail_after(60):
        await run_tree(config, body, **kw)
    for i, (fam, n, m, _, _) in enumerate(specs):
        assert len(ends[i]) == 1, ends[i]
        reason, toks = ends[i][0]
        expected = greedy_alone([fam] * 16 + [fam + i] * n, m)
        if reason == "length":
            assert toks == expected
        else:
            assert reason == "left" and toks == expected[:2]
