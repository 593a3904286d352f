"""Async scheduling (scheduler.py, NOTE on plans in flight): the next plan is made before the last one's
result is known, as the SchedulerActor runs it, and gives the same tokens as one plan at a time."""

from __future__ import annotations

from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from modelc.engine.core import EngineCore
from modelc.scheduler.batch import PLACEHOLDER, BatchResult
from modelc.scheduler.output import TokenEmitted
from modelc.scheduler.scheduler import Scheduler
from tests.scheduler.fakes import FakeRunner, fake_result, greedy_alone, make_scheduler, make_sequence
from tests.scheduler.test_scheduler import check, drive


def pipeline(sched: Scheduler, runner: FakeRunner, *, depth: int = 2, aborts: dict[int, int] | None = None):
    """Up to `depth` plans in flight (the actor's 1 + LOOKAHEAD), run in order by one runner: outputs and
    finish reasons per sequence. aborts: seq id -> abort it once it has this many tokens."""
    core = EngineCore(sched)
    aborts = dict(aborts or {})
    flights: deque = deque()
    out: dict[int, list[int]] = {}
    done: dict[int, tuple[list[int], str]] = {}

    def take(events) -> None:
        for ev in events:
            if isinstance(ev, TokenEmitted):
                out.setdefault(ev.seq_id, []).append(ev.token.token_id)
            if ev.finish is not None:
                assert ev.seq_id not in done, f"sequence {ev.seq_id} ended twice"
                done[ev.seq_id] = (out.pop(ev.seq_id, []), ev.finish.finish_reason)
            elif len(out.get(ev.seq_id, ())) == aborts.get(ev.seq_id):
                take(core.abort(ev.seq_id))

    for _ in range(5000):
        while len(flights) < depth:
            plan, events = core.schedule()
            take(events)
            if plan is None:
                break
            flights.append(plan)
        if not flights:
            assert not core.has_work, "work waiting and nothing planned with no plan in flight"
            assert sched.pool.num_used_blocks == 0
            return done
        plan = flights.popleft()
        take(core.update(plan, runner.execute(plan)))
        assert runner.max_batch_tokens_seen <= sched.config.max_batch_tokens
        check(sched)
    raise AssertionError("did not finish")


def test_a_decode_is_planned_behind_the_one_in_flight() -> None:
    sched = make_scheduler()
    sched.add(make_sequence(1, 20, max_tokens=3))
    first, _ = sched.schedule()
    second, _ = sched.schedule()  # the prefill's token is not known: a placeholder at position 20
    (c,) = second.chunks
    assert c.placeholder and list(c.token_ids) == [PLACEHOLDER] and c.start_pos == 20 and c.sample
    assert c.num_output_tokens == 1 and not c.is_new
    assert sched.schedule()[0] is not None  # position 21, behind two placeholders
    assert sched.schedule()[0] is None  # max_tokens=3: its last token is in flight
    runner = FakeRunner()
    emitted = []
    for plan in (first, second):
        emitted += sched.update(plan, runner.execute(plan))
    assert [ev.token.token_id for ev in emitted] == greedy_alone(make_sequence(1, 20).token_ids, 3)[:2]


def test_a_stop_drops_the_chunks_planned_after_it() -> None:
    sched = make_scheduler(eos_token_ids=(101,))
    sched.add(make_sequence(1, 20, max_tokens=10))
    first, _ = sched.schedule()
    second, _ = sched.schedule()
    (ev,) = sched.update(first, fake_result(first))  # token 101: EOS
    assert ev.finish.finish_reason == "stop" and ev.stop_token
    assert sched.pool.num_used_blocks == 0  # freed at once: only later plans can reuse the blocks
    assert sched.update(second, fake_result(second)) == []  # its work for the ended sequence is dropped
    assert sched.schedule()[0] is None and sched.release_plan().freed_seq_ids == (1,)  # the engine forgets it


def test_an_abort_waits_for_the_first_plan_holding_it() -> None:
    sched = make_scheduler()
    sched.add(make_sequence(1, 20, max_tokens=10))
    first, _ = sched.schedule()
    second, _ = sched.schedule()
    assert sched.abort(1) == []
    (ev,) = sched.update(first, fake_result(first))
    assert ev.finish.finish_reason == "abort"
    assert sched.update(second, fake_result(second)) == [] and sched.pool.num_used_blocks == 0


def test_an_engine_reset_drops_the_plans_in_flight() -> None:
    sched = make_scheduler()
    sched.add(make_sequence(1, 20, max_tokens=6))
    sched.add(make_sequence(2, 30, max_tokens=6))
    core = EngineCore(sched)
    first, _ = core.schedule()
    core.schedule()
    (a, b) = core.fail(first, "boom")  # both were in the failed batch
    assert {a.finish.finish_reason, b.finish.finish_reason} == {"error"}
    assert core.num_in_flight == 0 and sched.pool.num_used_blocks == 0
    sched.add(make_sequence(3, 20, max_tokens=4))
    core.schedule()
    second, _ = core.schedule()
    assert core.fail(core.scheduler._flights[0].plan, "boom")[0].finish.finish_reason == "error"
    assert second is not None and core.num_in_flight == 0  # the plan after it is dropped


def test_a_reset_recomputes_a_sequence_outside_the_failed_batch() -> None:
    sched = make_scheduler(max_batch_tokens=20, max_num_seqs=4)
    sched.add(make_sequence(1, 10, max_tokens=6))
    core = EngineCore(sched)
    runner = FakeRunner()
    emitted = []
    for _ in range(2):  # 1's prefill; then 1's decode and 2's first chunk
        plan, _ = core.schedule()
        emitted += core.update(plan, runner.execute(plan))
        sched.add(make_sequence(2, 60, max_tokens=2, priority=-1)) if not sched.has(2) else None
    failed, _ = core.schedule()  # 2 (priority -1) takes the whole budget
    ahead, _ = core.schedule()
    assert [c.seq_id for c in failed.chunks] == [2] and [c.seq_id for c in ahead.chunks] == [2]
    (ev,) = core.fail(failed, "boom")
    assert ev.seq_id == 2 and ev.finish.finish_reason == "error" and core.num_in_flight == 0
    done = pipeline(sched, FakeRunner())  # a fresh runner: sequence 1 starts over (is_new), same tokens
    tokens = [e.token.token_id for e in emitted if e.seq_id == 1] + done[1][0]
    assert tokens == greedy_alone(make_sequence(1, 10).token_ids, 6) and done[1][1] == "length"


@settings(max_examples=60, deadline=None)
@given(
    num_blocks=st.integers(3, 16),
    budget=st.integers(8, 48),
    depth=st.integers(2, 3),
    vocab=st.sampled_from([12, 1000]),
    spec=st.sampled_from([None, "ngram"]),
    lens=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 14), st.integers(0, 2)), min_size=1, max_size=8),
    abort_at=st.lists(st.integers(0, 6), min_size=8, max_size=8),
)
def test_random_workloads_give_one_plan_at_a_time_tokens(num_blocks, budget, depth, vocab, spec, lens, abort_at):
    """Preemption (a small pool), chunked prefill (a small budget), EOS stops (a small vocabulary), drafts
    and aborts, with 2-3 plans in flight: every sequence ends once, its tokens are the ones a plan at a time
    gives (an aborted one's a prefix of them), and every block comes back."""
    config = dict(num_blocks=num_blocks, max_batch_tokens=budget, max_num_seqs=6, eos_token_ids=(5,), speculative=spec)
    seqs = [make_sequence(i, p, start=i * 7, max_tokens=m, priority=pr) for i, (p, m, pr) in enumerate(lens)]
    fits = [s for s in seqs if s.num_tokens < num_blocks * 16]
    want_sched = make_scheduler(**config)
    for s in fits:
        want_sched.add(make_sequence(s.seq_id, s.num_tokens, start=s.seq_id * 7, max_tokens=s.params.max_tokens,
                                     priority=s.params.priority))  # fmt: skip
    want = drive(want_sched, FakeRunner(num_blocks, vocab_size=vocab))
    sched = make_scheduler(**config)
    for s in fits:
        sched.add(s)
    aborts = {s.seq_id: abort_at[s.seq_id] for s in fits if s.seq_id % 3 == 1}
    got = pipeline(sched, FakeRunner(num_blocks, vocab_size=vocab), depth=depth, aborts=aborts)
    assert set(got) == set(want)
    for seq_id, (tokens, reason) in got.items():
        if reason == "abort":
            assert seq_id in aborts and tokens == want[seq_id][0][: len(tokens)]
        else:
            assert (tokens, reason) == want[seq_id]


def test_an_error_result_fails_its_batch_and_the_pipeline_goes_on() -> None:
    sched = make_scheduler()
    sched.add(make_sequence(1, 20, max_tokens=4))
    sched.add(make_sequence(2, 20, start=50, max_tokens=4))
    first, _ = sched.schedule()
    second, _ = sched.schedule()
    evs = sched.update(first, BatchResult(first.step_id, (), error="bad plan"))
    assert {ev.finish.finish_reason for ev in evs} == {"error"} and sched.update(second, fake_result(second)) == []
    assert sched.pool.num_used_blocks == 0 and not sched.has_work
