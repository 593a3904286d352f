from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from modelc.engine.core import EngineCore
from modelc.errors import InvalidRequestError, OverloadedError
from modelc.scheduler.batch import BatchResult
from modelc.scheduler.output import SequenceFinished, TokenEmitted
from modelc.scheduler.scheduler import Scheduler
from modelc.scheduler.sequence import FINISH_REASONS, SequenceStatus
from tests.scheduler.fakes import FakeRunner, fake_result, greedy_alone, make_scheduler, make_sequence


def check(sched: Scheduler) -> None:
    pool = sched.pool
    pool.check()
    assert pool.num_free_blocks + pool.num_used_blocks == pool.num_blocks
    for seq in sched.running:
        assert pool.has_blocks(seq.seq_id, seq.num_computed_tokens)


def drive(sched: Scheduler, runner: FakeRunner, max_steps: int = 2000) -> dict[int, tuple[list[int], str]]:
    """EngineCore.step() (schedule -> FakeRunner -> update) until idle; invariants every step; outputs
    and finish reasons."""
    core = EngineCore(sched, runner)
    out: dict[int, list[int]] = {}
    done: dict[int, tuple[list[int], str]] = {}
    for _ in range(max_steps):
        for ev in core.step():
            if isinstance(ev, TokenEmitted):
                out.setdefault(ev.seq_id, []).append(ev.token.token_id)
            if ev.finish is not None:
                done[ev.seq_id] = (out.pop(ev.seq_id, []), ev.finish.finish_reason)
        assert runner.max_batch_tokens_seen <= sched.config.max_batch_tokens
        check(sched)
        if not core.has_work:
            return done
    raise AssertionError("did not finish")


def test_status_order_and_finish_reasons() -> None:
    assert not SequenceStatus.RUNNING.is_finished and SequenceStatus.FINISHED_STOPPED.is_finished
    assert {FINISH_REASONS[s] for s in SequenceStatus if s.is_finished} == {"stop", "length", "abort", "error"}


def test_prefill_then_decode_then_length() -> None:
    sched = make_scheduler()
    sched.add(make_sequence(1, 20, max_tokens=3))
    plan, _ = sched.schedule()
    (c,) = plan.chunks
    assert c.is_new and c.sample and c.start_pos == 0 and len(c.token_ids) == 20 and len(c.block_table) == 2
    assert not c.token_ids.flags.writeable
    evs = sched.update(plan, fake_result(plan))
    assert evs == [TokenEmitted(1, fake_result(plan).tokens[0])]
    plan, _ = sched.schedule()
    (c,) = plan.chunks
    assert not c.is_new and c.start_pos == 20 and list(c.token_ids) == [101] and c.num_output_tokens == 1
    sched.update(plan, fake_result(plan))
    plan, _ = sched.schedule()
    (ev,) = sched.update(plan, fake_result(plan))
    assert ev.finish.finish_reason == "length" and ev.finish.completion_tokens == 3 and ev.finish.prompt_tokens == 20
    assert sched.pool.num_used_blocks == 0 and not sched.has_work
    # the engine is told to drop the finished sequence with the next plan
    sched.add(make_sequence(2, 5))
    assert sched.schedule()[0].freed_seq_ids == (1,)


def test_eos_respects_ignore_eos_and_min_tokens() -> None:
    sched = make_scheduler(eos_token_ids=(2,))
    sched.add(make_sequence(1, 5, max_tokens=10))
    sched.add(make_sequence(2, 5, max_tokens=10, ignore_eos=True))
    sched.add(make_sequence(3, 5, max_tokens=10, min_tokens=2))
    sched.add(make_sequence(4, 5, max_tokens=10, stop_token_ids=(2,), ignore_eos=True))
    plan, _ = sched.schedule()
    evs = {e.seq_id: e for e in sched.update(plan, fake_result(plan, lambda s: 2))}
    assert evs[1].finish.finish_reason == "stop" and evs[1].stop_token
    assert evs[2].finish is None and not evs[2].stop_token
    assert evs[3].finish is None  # first output token: below min_tokens
    assert evs[4].finish.finish_reason == "stop"
    plan, _ = sched.schedule()
    evs = {e.seq_id: e for e in sched.update(plan, fake_result(plan, lambda s: 2))}
    assert evs[3].finish is None  # 2 outputs: still not more than min_tokens
    plan, _ = sched.schedule()
    evs = {e.seq_id: e for e in sched.update(plan, fake_result(plan, lambda s: 2))}
    assert evs[3].finish.finish_reason == "stop"


def test_constraint_done_stops() -> None:
    sched = make_scheduler()
    sched.add(make_sequence(1, 5))
    plan, _ = sched.schedule()
    (ev,) = sched.update(plan, fake_result(plan, constraint_done=True))
    assert ev.finish.finish_reason == "stop" and not ev.stop_token


def test_max_model_len_and_max_tokens_zero() -> None:
    sched = make_scheduler(max_model_len=22)
    with pytest.raises(InvalidRequestError):
        sched.add(make_sequence(9, 22))
    (ev,) = sched.add(make_sequence(8, 5, max_tokens=0))
    assert isinstance(ev, SequenceFinished) and ev.finish.finish_reason == "length"
    sched.add(make_sequence(1, 20, max_tokens=100))
    done = drive(sched, FakeRunner(64))
    assert done[1][1] == "length" and len(done[1][0]) == 2


def test_queue_full_raises_overloaded_at_once() -> None:
    sched = make_scheduler(max_queue=2)
    sched.add(make_sequence(1))
    sched.add(make_sequence(2))
    with pytest.raises(OverloadedError):
        sched.add(make_sequence(3))
    with pytest.raises(InvalidRequestError):
        sched.add(make_sequence(1))
    with pytest.raises(InvalidRequestError):
        sched.add(make_sequence(4, 0))


def test_prompt_larger_than_the_cache_is_refused() -> None:
    sched = make_scheduler(num_blocks=2)
    with pytest.raises(InvalidRequestError, match="KV cache"):
        sched.add(make_sequence(1, 32))


def test_chunked_prefill_respects_the_budget() -> None:
    sched = make_scheduler(max_batch_tokens=16, max_num_seqs=4)
    sched.add(make_sequence(1, 40, max_tokens=2))
    starts = []
    while (plan := sched.schedule()[0]) is not None:
        assert plan.num_tokens <= 16
        starts += [(c.start_pos, len(c.token_ids), c.sample) for c in plan.chunks]
        sched.update(plan, fake_result(plan))
    assert starts[:3] == [(0, 16, False), (16, 16, False), (32, 8, True)]


def test_decodes_go_before_new_prefills() -> None:
    sched = make_scheduler(max_batch_tokens=24, max_num_seqs=4)
    sched.add(make_sequence(1, 10))
    plan, _ = sched.schedule()
    sched.update(plan, fake_result(plan))
    sched.add(make_sequence(2, 40))
    plan, _ = sched.schedule()
    assert [(c.seq_id, len(c.token_ids)) for c in plan.chunks] == [(1, 1), (2, 23)]


def test_max_num_seqs_caps_the_running_set() -> None:
    sched = make_scheduler(max_num_seqs=2, max_batch_tokens=64)
    for i in range(4):
        sched.add(make_sequence(i, 5))
    plan, _ = sched.schedule()
    assert [c.seq_id for c in plan.chunks] == [0, 1] and len(sched.waiting) == 2


def test_priority_then_fcfs() -> None:
    sched = make_scheduler(max_num_seqs=1, max_batch_tokens=64)
    sched.add(make_sequence(1, 5, priority=1))
    sched.add(make_sequence(2, 5, priority=0))
    sched.add(make_sequence(3, 5, priority=0))
    assert [c.seq_id for c in sched.schedule()[0].chunks] == [2]
    assert [s.seq_id for s in sched.waiting] == [3, 1]


def test_prefix_hit_discounts_the_prompt() -> None:
    sched = make_scheduler()
    sched.add(make_sequence(1, 40, max_tokens=1))
    drive(sched, FakeRunner(64))
    sched.add(make_sequence(2, 40, max_tokens=1))
    plan, _ = sched.schedule()
    (c,) = plan.chunks
    assert c.start_pos == 32 and len(c.token_ids) == 8
    (ev,) = sched.update(plan, fake_result(plan))
    assert ev.finish.cached_tokens == 32
    assert sched.stats()["prefix_hits"] == 32 and sched.stats()["prefix_queries"] == 80


def test_outputs_equal_alone_with_prefix_hits_chunking_and_preemption() -> None:
    """16 sequences sharing prefixes on a tiny pool: same tokens as each run alone."""
    prompts = {i: [5 + (i % 3)] * 20 + [i + 50] * (i % 7 + 1) for i in range(16)}
    expected = {i: greedy_alone(p, 12) for i, p in prompts.items()}
    sched = make_scheduler(num_blocks=12, max_batch_tokens=24, max_num_seqs=8)
    for i, p in prompts.items():
        seq = make_sequence(i, 0, max_tokens=12)
        seq.token_ids = list(p)
        seq.num_prompt_tokens = len(p)
        sched.add(seq)
    done = drive(sched, FakeRunner(12))
    assert {i: d[0] for i, d in done.items()} == expected
    stats = sched.stats()
    assert stats["preemptions"] > 0 and stats["prefix_hits"] > 0
    assert stats["kv_blocks_used"] == 0


def test_preempts_the_newest_and_admits_nothing_that_step() -> None:
    sched = make_scheduler(num_blocks=4, max_batch_tokens=64)
    sched.add(make_sequence(1, 32, max_tokens=30))
    sched.add(make_sequence(2, 32, max_tokens=30, start=500))
    runner = FakeRunner(4)
    plan, _ = sched.schedule()
    assert len(plan.chunks) == 2 and sched.pool.num_free_blocks == 0
    sched.update(plan, runner.execute(plan))
    sched.add(make_sequence(3, 3))
    plan, _ = sched.schedule()  # both need a 3rd block: the newest (2) is preempted
    assert [c.seq_id for c in plan.chunks] == [1]
    assert [s.seq_id for s in sched.waiting] == [2, 3]
    assert sched.waiting[0].num_computed_tokens == 0 and sched.waiting[0].num_output_tokens == 1
    assert sched.stats()["preemptions"] == 1
    sched.update(plan, runner.execute(plan))
    check(sched)


def test_recompute_after_preemption_keeps_engine_state() -> None:
    sched = make_scheduler(num_blocks=4, max_batch_tokens=64)
    sched.add(make_sequence(1, 31, max_tokens=40))
    sched.add(make_sequence(2, 31, max_tokens=3, start=500))
    done = drive(sched, FakeRunner(4))  # FakeRunner asserts is_new exactly once per sequence
    assert done[2] == (greedy_alone(make_sequence(2, 31, start=500).token_ids, 3), "length")
    assert done[1][1] == "length"


def test_sequence_longer_than_the_pool_ends_with_length() -> None:
    sched = make_scheduler(num_blocks=2)
    sched.add(make_sequence(1, 20, max_tokens=100))
    done = drive(sched, FakeRunner(2))
    assert done[1][1] == "length" and len(done[1][0]) == 12  # 32 slots: 20 prompt + 12 output, never one more


def test_pool_smaller_than_the_context_ends_at_the_pool_with_the_last_token() -> None:
    # The model's context (2048) is larger than the pool (32 slots): prompt + output stops at 32, and the
    # token that fills the pool carries the "length" finish (as vLLM's max_model_len), no extra step.
    sched = make_scheduler(num_blocks=2, max_model_len=2048)
    sched.add(make_sequence(1, 20, max_tokens=100))
    emitted = []
    while sched.has_work:
        plan, ends = sched.schedule()
        assert plan is not None and plan.num_tokens + plan.chunks[0].start_pos <= 32 and ends == []
        emitted += sched.update(plan, fake_result(plan))
    assert all(isinstance(ev, TokenEmitted) for ev in emitted) and len(emitted) == 12
    assert emitted[-1].finish.finish_reason == "length" and emitted[-1].finish.completion_tokens == 12
    assert sched.pool.num_used_blocks == 0


def test_abort_waiting_running_and_in_flight() -> None:
    sched = make_scheduler(max_num_seqs=1)
    sched.add(make_sequence(1))
    sched.add(make_sequence(2))
    plan, _ = sched.schedule()
    (ev,) = sched.abort(2)  # waiting: at once
    assert ev.finish.finish_reason == "abort"
    assert sched.abort(1) == []  # in flight: at update
    (ev,) = sched.update(plan, fake_result(plan))
    assert isinstance(ev, SequenceFinished) and ev.finish.finish_reason == "abort"
    assert sched.pool.num_used_blocks == 0 and not sched.has(1)
    assert sched.abort(42) == []


def test_engine_error_fails_the_batch() -> None:
    sched = make_scheduler()
    sched.add(make_sequence(1))
    plan, _ = sched.schedule()
    (ev,) = sched.update(plan, BatchResult(plan.step_id, (), error="boom"))
    assert ev.finish.finish_reason == "error" and ev.finish.error == "boom"
    assert sched.pool.num_used_blocks == 0


def test_reset_engine_state_recomputes() -> None:
    sched = make_scheduler()
    sched.add(make_sequence(1, 20, max_tokens=4))
    runner = FakeRunner(64)
    plan, _ = sched.schedule()
    (first,) = sched.update(plan, runner.execute(plan))
    sched.reset_engine_state()
    done = drive(sched, FakeRunner(64))  # a fresh runner: is_new again, full recompute
    assert [first.token.token_id, *done[1][0]] == greedy_alone(make_sequence(1, 20).token_ids, 4)


@settings(max_examples=40, deadline=None)
@given(
    num_blocks=st.integers(3, 20),
    budget=st.integers(8, 64),
    lens=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 12), st.integers(0, 2)), min_size=1, max_size=10),
)
def test_random_workloads_finish_with_alone_outputs(num_blocks, budget, lens) -> None:
    sched = make_scheduler(num_blocks=num_blocks, max_batch_tokens=budget, max_num_seqs=8)
    expected = {}
    for i, (n, m, fam) in enumerate(lens):
        seq = make_sequence(i, n, start=fam * 100, max_tokens=m)
        if seq.num_tokens >= num_blocks * 16:
            continue
        expected[i] = greedy_alone(seq.token_ids, m)
        sched.add(seq)
    done = drive(sched, FakeRunner(num_blocks))
    for i, toks in expected.items():
        got, reason = done[i]
        if reason == "length" and len(got) < len(toks):  # outgrew the whole pool
            assert make_sequence(i, lens[i][0]).num_tokens + len(got) >= num_blocks * 16
            toks = toks[: len(got)]
        assert got == toks
    assert sched.pool.num_used_blocks == 0
