from __future__ import annotations

import numba
import numpy as np
import pytest

from modelc.engine import thread_tuner
from modelc.engine.runner import Runner
from modelc.engine.thread_tuner import (
    ABORT_STEPS,
    BLOCK,
    FIRST_PROBE,
    MAX_PERIOD,
    PERIOD,
    ROUNDS,
    ThreadTuner,
    batch_key,
    others_running,
)
from modelc.models.tiny import make_tiny_llama
from modelc.request import SamplingParams
from modelc.scheduler.batch import BatchPlan, SeqChunk


@pytest.fixture(autouse=True)
def probe_at_once(request, monkeypatch):
    """Small batches probe from their first step here (FIRST_PROBE 0), unless a test is about the first probe."""
    if "first_probe" not in request.node.name:
        monkeypatch.setattr(thread_tuner, "FIRST_PROBE", 0)
    if "busy_start" not in request.node.name:  # this machine's own load must not decide how a tuner starts
        monkeypatch.setattr(thread_tuner, "busy_now", lambda threads: False)


def _drive(tuner: ThreadTuner, key: int, cost: dict[int, float], steps: int, first: float | None = None) -> list[int]:
    """Run `steps` decode steps whose time is cost[threads] (a block's first step `first` when given)."""
    used = []
    for _ in range(steps):
        n = tuner.threads_for(key)
        probing = bool(tuner._keys[key].plan)
        is_first = probing and len(tuner._keys[key].plan) % BLOCK == 0
        tuner.record(key, n, first if first is not None and is_first else cost[n])
        used.append(n)
    return used


def test_probe_alternates_blocks_then_keeps_the_faster():
    t = ThreadTuner(4)
    assert t.candidates == [4, 2] and t.active and t.prompt_threads() == 4
    probe = len(t.candidates) * BLOCK * ROUNDS
    used = _drive(t, 1, {4: 1.9, 2: 1.0}, probe + 10)
    assert used[:probe] == ([2] * BLOCK + [4] * BLOCK) * ROUNDS  # half the threads first
    assert used[probe:] == [2] * 10 and t.choice(1) == 2
    # the machine looks contended: steps the tuner does not time take half the threads too
    assert t.contended and t.prompt_threads() == 2
    # a bigger batch probes too (apart), and there more threads win
    used = _drive(t, 8, {4: 1.0, 2: 1.5}, probe + 3)
    assert used[:probe] == ([2] * BLOCK + [4] * BLOCK) * ROUNDS
    assert used[probe:] == [4] * 3 and t.choice(1) == 2 and t.contended


def test_a_candidate_far_slower_than_the_other_is_cut_short():
    t = ThreadTuner(2)
    # beside a busy process, 2 spinning threads run 10x slower than 1: ABORT_STEPS counted steps of them end the
    # probe (the first after the switch is not counted, it may pay for the switch)
    cut = 1 + ABORT_STEPS
    used = _drive(t, 1, {2: 10.0, 1: 1.0}, BLOCK + cut + 2)
    assert used == [1] * BLOCK + [2] * cut + [1, 1]
    st = t._keys[1]
    assert t.choice(1) == 1 and t.contended and not st.plan and st.period == 2 * PERIOD
    # each probe cut short doubles the wait before the next, up to MAX_PERIOD
    used = _drive(t, 1, {2: 10.0, 1: 1.0}, 2 * PERIOD + BLOCK + cut)
    assert used.count(2) == cut and st.period == 4 * PERIOD
    for _ in range(10):
        _drive(t, 1, {2: 10.0, 1: 1.0}, st.period + BLOCK + cut)
    assert st.period == MAX_PERIOD
    # the neighbour left: the next probe runs whole, finds every thread as fast, and the period is reset
    used = _drive(t, 1, {2: 1.0, 1: 0.95}, MAX_PERIOD + 2 * BLOCK * ROUNDS + 1)
    assert used[-1] == 2 and st.period == PERIOD and not t.contended and t.prompt_threads() == 2


def test_big_batches_probe_only_on_drift_or_contention():
    t = ThreadTuner(2)
    probe = 2 * BLOCK * ROUNDS
    # quiet: a 16-row batch stays on every thread from its first step, however long it runs
    assert _drive(t, 16, {2: 1.0, 1: 2.0}, PERIOD * 2) == [2] * (PERIOD * 2)
    # its steps turn 4x slower: within BLOCK of them it probes, and moves where half is faster
    slow = 0
    while not t._keys[16].plan:
        assert slow < BLOCK
        _drive(t, 16, {2: 4.0, 1: 3.0}, 1)
        slow += 1
    used = _drive(t, 16, {2: 4.0, 1: 3.0}, probe + 1)  # the loop's last step was the probe's first
    assert used == (([1] * BLOCK + [2] * BLOCK) * ROUNDS)[1:] + [1, 1]
    assert t.contended  # half the threads 1.33x faster on a big batch: the machine is contended
    # a single stream a little faster on half the threads takes them, but that is no contention
    _drive(t, 1, {2: 1.2, 1: 1.0}, probe)
    assert t.choice(1) == 1 and not t.contended
    t = ThreadTuner(2)
    # a single stream finds half faster: the machine is contended, so a new big batch probes at once
    _drive(t, 1, {2: 2.0, 1: 1.0}, probe)
    assert t.contended and t.choice(1) == 1
    assert _drive(t, 8, {2: 1.0, 1: 1.5}, probe + 1) == ([1] * BLOCK + [2] * BLOCK) * ROUNDS + [2]
    # the single stream finds every thread faster again: no longer contended
    _drive(t, 1, {2: 1.0, 1: 1.5}, PERIOD + probe)
    assert not t.contended and t.choice(1) == 2


def test_half_the_threads_must_be_clearly_faster():
    t = ThreadTuner(2)
    probe = 2 * BLOCK * ROUNDS
    assert _drive(t, 1, {2: 1.05, 1: 1.0}, probe + 1)[-1] == 2  # within PREFER: every thread
    t = ThreadTuner(2)
    assert _drive(t, 1, {2: 1.15, 1: 1.0}, probe + 1)[-1] == 1 and not t.contended


def test_first_step_of_each_block_is_not_counted():
    t = ThreadTuner(2)
    probe = 2 * BLOCK * ROUNDS
    # 1 thread is faster except on the step right after each switch, which would tip a mean over
    used = _drive(t, 1, {2: 1.0, 1: 0.8}, probe + 1, first=1.9)
    assert used[-1] == 1
    # nor does a slow first step cut a candidate short (it may pay for the switch: a wake-up, a page fault)
    t = ThreadTuner(2)
    used = _drive(t, 1, {2: 0.8, 1: 1.0}, probe + 1, first=30.0)
    assert used[:probe] == ([1] * BLOCK + [2] * BLOCK) * ROUNDS and used[-1] == 2


def test_probes_again_after_the_period_and_on_drift():
    t = ThreadTuner(2)
    probe = 2 * BLOCK * ROUNDS
    _drive(t, 1, {2: 1.0, 1: 1.5}, probe)
    assert t.choice(1) == 2
    used = _drive(t, 1, {2: 1.0, 1: 1.5}, PERIOD + 1)
    assert used[:PERIOD] == [2] * PERIOD and used[PERIOD] == 1 and t._keys[1].plan  # a new probe began
    _drive(t, 1, {2: 1.0, 1: 1.5}, probe - 1)
    assert t.choice(1) == 2 and not t._keys[1].plan
    # a neighbour appears: 2 threads become 3x slower; after BLOCK slow steps the tuner probes, and moves
    used = _drive(t, 1, {2: 3.0, 1: 1.5}, BLOCK + probe + 2)
    assert used[:BLOCK] == [2] * BLOCK and used[-2:] == [1, 1]


def test_one_thread_or_off_means_no_tuning(monkeypatch):
    t = ThreadTuner(1)
    assert not t.active and t.threads_for(1) == 1
    t.record(1, 1, 1.0)
    monkeypatch.setenv("MODELC_THREAD_TUNER", "0")
    assert not thread_tuner.enabled()
    assert not Runner(make_tiny_llama(1), num_kv_blocks=4, threads=2).tuner.active


def test_batch_key_buckets():
    assert [batch_key(n) for n in (1, 2, 3, 4, 5, 8, 9, 16, 17)] == [1, 2, 3, 4, 8, 8, 16, 16, 32]


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 numba threads")
def test_runner_runs_decode_steps_on_the_tuned_count_and_prefill_on_all_unless_contended():
    runner = Runner(make_tiny_llama(2), num_kv_blocks=8, threads=2)
    seen: list[tuple[int, int]] = []  # (tokens in the step, numba threads during its forward)
    forward = runner.model.forward

    def spy(batch, kv):
        seen.append((len(batch.token_ids), numba.get_num_threads()))
        return forward(batch, kv)

    runner.model.forward = spy
    asked: list[int] = []
    runner.tuner.threads_for = lambda key: asked.append(key) or 1
    runner.tuner.record = lambda key, n, s: None
    greedy = SamplingParams(temperature=0.0, max_tokens=8)
    table = np.array([2, 0], np.int32)

    def chunk(ids, start):
        return SeqChunk(1, np.asarray(ids, np.int32), start, table, True, greedy, 5, max(0, start - 4), start == 0)

    res = runner.execute(BatchPlan(0, (chunk([5, 17, 3, 88, 41], 0),)))
    tok = res.tokens[0].token_id
    for pos in range(5, 8):
        tok = runner.execute(BatchPlan(pos, (chunk([tok], pos),))).tokens[0].token_id
    runner.execute(BatchPlan(9, (chunk([1, 2, 3], 8),)))  # a prefill chunk again: every thread
    runner.tuner.contended = True
    runner.execute(BatchPlan(10, (chunk([4, 5], 11),)))  # on a contended machine: half the threads
    assert seen == [(5, 2), (1, 1), (1, 1), (1, 1), (3, 2), (2, 1)]
    assert asked == [1, 1, 1]


def test_a_slowdown_on_half_the_threads_waits_for_the_period():
    t = ThreadTuner(2)
    cut = 1 + ABORT_STEPS
    _drive(t, 1, {2: 10.0, 1: 1.0}, BLOCK + cut)  # contended: 1 thread, the probe cut short
    assert t.choice(1) == 1
    # the neighbour gets heavier: 1 thread slows 3x; every thread would compete harder, so no probe yet
    assert _drive(t, 1, {2: 30.0, 1: 3.0}, 2 * PERIOD) == [1] * (2 * PERIOD)
    assert _drive(t, 1, {2: 30.0, 1: 3.0}, BLOCK + cut) == [1] * BLOCK + [2] * cut  # the period's probe


def test_no_probe_starts_while_weights_move_onto_huge_pages(monkeypatch):
    t = ThreadTuner(4)
    moving = [True]
    monkeypatch.setattr(thread_tuner.hugepages, "moving", lambda: moving[0])
    assert _drive(t, 1, {4: 1.0, 2: 0.1}, 20) == [4] * 20  # the configured count, no probe
    assert not t._keys[1].plan and t.choice(1) == 4
    moving[0] = False
    used = _drive(t, 1, {4: 1.0, 2: 0.1}, 2 * BLOCK * ROUNDS + 5)
    assert 2 in used[: 2 * BLOCK] and used[-5:] == [2] * 5  # the probe runs once the move is done


def test_one_or_two_slow_wake_ups_do_not_cut_a_probe_short():
    """A thread woken after a block on half the threads took 100-300 ms for one or two steps of a served 7 ms
    decode (SmolLM2-135M, 2 vCPUs): the median of ABORT_STEPS counted steps decides, and the probe runs whole."""
    t = ThreadTuner(2)
    probe = 2 * BLOCK * ROUNDS
    used = []
    for _ in range(probe + 3):
        n = t.threads_for(1)
        st = t._keys[1]
        block_step = (probe - len(st.plan)) % BLOCK if st.plan else None
        # every thread: 6 ms, but the first two steps after each switch back to them take 300 ms
        slow = n == 2 and block_step in (0, 1)
        t.record(1, n, 0.3 if slow else {2: 0.006, 1: 0.010}[n])
        used.append(n)
    assert used[:probe] == ([1] * BLOCK + [2] * BLOCK) * ROUNDS and t.choice(1) == 2 and not t.contended


def test_first_probe_waits_on_a_quiet_machine_and_not_on_a_busy_one(monkeypatch):
    # quiet: a small batch runs FIRST_PROBE steps on every thread (a server's first requests at full speed)
    monkeypatch.setattr(thread_tuner, "others_running", lambda threads: False)
    t = ThreadTuner(2)
    used = _drive(t, 1, {2: 1.0, 1: 1.5}, FIRST_PROBE + 1)
    assert used[:FIRST_PROBE] == [2] * FIRST_PROBE and used[FIRST_PROBE] == 1 and t._keys[1].plan
    # its steps drift (a neighbour came) before then: it probes at once
    t = ThreadTuner(2)
    _drive(t, 1, {2: 1.0, 1: 1.5}, BLOCK)
    used = _drive(t, 1, {2: 3.0, 1: 1.5}, BLOCK + 1)
    assert used[: BLOCK // 2] == [2] * (BLOCK // 2) and used[BLOCK // 2] == 1  # most of the last BLOCK slow
    # other processes runnable in most of the last BLOCK steps: it probes within them, and moves
    monkeypatch.setattr(thread_tuner, "others_running", lambda threads: True)
    t = ThreadTuner(2)
    used = _drive(t, 1, {2: 3.0, 1: 1.0}, BLOCK + 2 * BLOCK * ROUNDS)
    assert used.index(1) < BLOCK and used[-1] == 1 and t.contended
    # a bigger batch never waits on this: it probes only on drift or contention
    t = ThreadTuner(2)
    assert _drive(t, 8, {2: 1.0, 1: 0.5}, FIRST_PROBE + 1) == [2] * (FIRST_PROBE + 1)


def test_first_probe_busy_start_runs_half_the_threads_then_probes_as_a_quiet_start(monkeypatch):
    """A neighbour holds a core at the first step: start on half the threads (no steps on every thread waiting
    for a core in the first request) and probe after FIRST_PROBE steps, as a quiet start does."""
    monkeypatch.setattr(thread_tuner, "others_running", lambda threads: True)
    monkeypatch.setattr(thread_tuner.time, "sleep", lambda s: None)
    t = ThreadTuner(2)
    assert t.prompt_threads() == 2
    used = _drive(t, 1, {2: 3.0, 1: 1.0}, FIRST_PROBE + 2 * BLOCK * ROUNDS + 5)
    assert used == [1] * len(used) and t._keys[1].started_half and t.contended  # no probe while still busy
    monkeypatch.setattr(thread_tuner, "others_running", lambda threads: False)  # the neighbour is gone
    used = _drive(t, 1, {2: 3.0, 1: 1.0}, FIRST_PROBE + 2 * BLOCK * ROUNDS)
    assert 2 in used and used[-5:] == [1] * 5 and t.contended  # probed, and half the threads were still faster
    monkeypatch.setattr(thread_tuner, "others_running", lambda threads: True)
    t2 = ThreadTuner(2)
    t2.threads_for(1)
    assert t2.contended and t2.prompt_threads() == 1  # prompts on half the threads while contended
    # the neighbour left: the probe after FIRST_PROBE steps finds every thread faster, and the machine quiet
    t3 = ThreadTuner(2)
    t3.threads_for(1)
    monkeypatch.setattr(thread_tuner, "others_running", lambda threads: False)
    used = [1] + _drive(t3, 1, {2: 1.0, 1: 1.6}, FIRST_PROBE + 2 * BLOCK * ROUNDS + 4)
    monkeypatch.setattr(thread_tuner, "others_running", lambda threads: True)
    assert used[:FIRST_PROBE] == [1] * FIRST_PROBE and used[-5:] == [2] * 5 and not t3.contended
    # a transient task in one of the reads is no neighbour; nor is anything on a bigger batch
    reads = iter([True, False, True])
    monkeypatch.setattr(thread_tuner, "others_running", lambda threads: next(reads))
    assert not thread_tuner.busy_now(2)
    monkeypatch.setattr(thread_tuner, "others_running", lambda threads: True)
    t4 = ThreadTuner(2)
    assert t4.threads_for(8) == 2 and not t4.contended


def _tasks(root, states):
    """A fake /proc/self/task: one thread per state letter (the command names hold spaces and parentheses)."""
    for i, state in enumerate(states):
        (root / str(100 + i)).mkdir(parents=True)
        (root / str(100 + i) / "stat").write_text(f"{100 + i} (python (x) y) {state} 1 2 3\n")
    return str(root)


def test_first_probe_others_running_reads_runnable_tasks_against_cpus(tmp_path, monkeypatch):
    monkeypatch.setattr(thread_tuner.os, "cpu_count", lambda: 2)
    f = tmp_path / "loadavg"
    alone = _tasks(tmp_path / "alone", "RRS")  # the caller and its spinning kernel thread
    served = _tasks(tmp_path / "served", "RRRS")  # and a server's event loop
    f.write_text("1.50 1.20 1.00 3/412 9999\n")
    assert others_running(2, str(f), alone)  # a third runnable task is another process's
    assert not others_running(2, str(f), served)  # ... or this process's own loop: no neighbour
    f.write_text("1.50 1.20 1.00 4/412 9999\n")
    assert others_running(2, str(f), served)
    f.write_text("1.50 1.20 1.00 2/412 9999\n")
    assert not others_running(1, str(f), _tasks(tmp_path / "one", "RS"))  # 1 thread: the other one has a CPU
    f.write_text("1.50 1.20 1.00 1/412 9999\n")
    assert not others_running(2, str(f), str(tmp_path / "missing"))  # only the caller: no task read
    f.write_text("1.50 1.20 1.00 2/412 9999\n")
    assert not others_running(2, str(f), _tasks(tmp_path / "two", "RR"))
    assert not others_running(2, str(tmp_path / "missing"))
    f.write_text("garbage\n")
    assert not others_running(2, str(f))
    assert thread_tuner.own_running(alone) == 2 and thread_tuner.own_running(str(tmp_path / "missing")) == 1
