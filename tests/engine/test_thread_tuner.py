from __future__ import annotations

import numba
import numpy as np
import pytest

from modelc.engine import thread_tuner
from modelc.engine.runner import Runner
from modelc.engine.thread_tuner import BLOCK, PERIOD, ROUNDS, ThreadTuner, batch_key
from modelc.models.tiny import make_tiny_llama
from modelc.request import SamplingParams
from modelc.scheduler.batch import BatchPlan, SeqChunk


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
    assert t.candidates == [4, 2] and t.active
    probe = len(t.candidates) * BLOCK * ROUNDS
    used = _drive(t, 1, {4: 2.0, 2: 1.0}, probe + 10)
    assert used[:probe] == ([4] * BLOCK + [2] * BLOCK) * ROUNDS
    assert used[probe:] == [2] * 10 and t.choice(1) == 2
    # the machine looks contended: a bigger batch probes too (apart), and there more threads win
    assert t.contended
    used = _drive(t, 8, {4: 1.0, 2: 3.0}, probe + 3)
    assert used[:probe] == ([4] * BLOCK + [2] * BLOCK) * ROUNDS
    assert used[probe:] == [4] * 3 and t.choice(1) == 2 and t.contended


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
    assert used == (([2] * BLOCK + [1] * BLOCK) * ROUNDS)[1:] + [1, 1]
    assert not t.contended  # only a small batch's probe says so
    # a single stream a little faster on half the threads takes them, but that is no contention
    _drive(t, 1, {2: 1.1, 1: 1.0}, probe)
    assert t.choice(1) == 1 and not t.contended
    t = ThreadTuner(2)
    # a single stream finds half faster: the machine is contended, so a new big batch probes at once
    _drive(t, 1, {2: 2.0, 1: 1.0}, probe)
    assert t.contended and t.choice(1) == 1
    assert _drive(t, 8, {2: 1.0, 1: 2.0}, probe + 1) == ([2] * BLOCK + [1] * BLOCK) * ROUNDS + [2]
    # the single stream finds every thread faster again: no longer contended
    _drive(t, 1, {2: 1.0, 1: 2.0}, PERIOD + probe)
    assert not t.contended and t.choice(1) == 2


def test_first_step_of_each_block_is_not_counted():
    t = ThreadTuner(2)
    probe = 2 * BLOCK * ROUNDS
    # 1 thread is faster except on the step right after each switch, which would tip a mean over
    used = _drive(t, 1, {2: 1.0, 1: 0.8}, probe + 1, first=50.0)
    assert used[-1] == 1


def test_probes_again_after_the_period_and_on_drift():
    t = ThreadTuner(2)
    probe = 2 * BLOCK * ROUNDS
    _drive(t, 1, {2: 1.0, 1: 2.0}, probe)
    assert t.choice(1) == 2
    used = _drive(t, 1, {2: 1.0, 1: 2.0}, PERIOD + 1)
    assert used[:PERIOD] == [2] * PERIOD and used[PERIOD] == 2 and t._keys[1].plan  # a new probe began
    _drive(t, 1, {2: 1.0, 1: 2.0}, probe - 1)
    assert t.choice(1) == 2 and not t._keys[1].plan
    # a neighbour appears: 2 threads become 3x slower; after BLOCK slow steps the tuner probes, and moves
    used = _drive(t, 1, {2: 3.0, 1: 2.0}, BLOCK + probe + 2)
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
def test_runner_runs_decode_steps_on_the_tuned_count_and_prefill_on_all():
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
    assert seen == [(5, 2), (1, 1), (1, 1), (1, 1), (3, 2)]
    assert asked == [1, 1, 1]
