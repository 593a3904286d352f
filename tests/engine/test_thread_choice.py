"""engine/thread_choice.py: the thread tuner's choices kept across restarts, per model file, thread budget and CPU."""

from __future__ import annotations

import json
import os

import pytest

from modelc.artifact import write_artifact
from modelc.artifact.reader import open_artifact
from modelc.engine import thread_choice, thread_tuner
from modelc.engine.runner import Runner
from modelc.engine.thread_tuner import BLOCK, PROBE_STEPS, ThreadTuner
from modelc.kernels.runtime import jit_cache
from modelc.kernels.select import kernel_set
from modelc.models.tiny import make_tiny_llama


@pytest.fixture
def model(tmp_path, monkeypatch):
    """A model file, its choice files in a folder of this test, and tuners that probe from their first step
    (FIRST_PROBE 0: what a busy machine does; a server's first request after a restart did, the client reading
    its stream being the other process)."""
    monkeypatch.setattr(jit_cache, "cache_dir", lambda: tmp_path / "cache")
    monkeypatch.delenv("MODELC_KERNELS", raising=False)  # runners on the numba kernels
    monkeypatch.setattr(thread_tuner, "FIRST_PROBE", 0)
    monkeypatch.setattr(thread_tuner, "busy_now", lambda threads: False)  # not this machine's load
    monkeypatch.setattr(thread_tuner.hugepages, "moving", lambda: False)
    return write_artifact(make_tiny_llama(3), tmp_path / "m.modelc")


def _runner(path, threads=2, kernels=None):
    return Runner(open_artifact(path), num_kv_blocks=8, threads=threads, kernels=kernels)


def _drive(tuner: ThreadTuner, cost: dict[int, float], steps: int) -> list[int]:
    """`steps` single-stream decode steps whose time is cost[threads]; the thread count of each."""
    used = []
    for _ in range(steps):
        n = tuner.threads_for(1)
        tuner.record(1, n, cost[n])
        used.append(n)
    return used


@pytest.mark.parametrize("cost, kept", [({2: 1.0, 1: 1.5}, 2), ({2: 3.0, 1: 1.0}, 1)])
def test_a_restart_with_a_kept_choice_runs_no_probe(model, cost, kept):
    first = _runner(model)
    assert first.tuner.memory is not None
    used = _drive(first.tuner, cost, PROBE_STEPS + 3)
    assert set(used[:PROBE_STEPS]) == {1, 2} and first.tuner.choice(1) == kept  # it probed, then decided
    again = _runner(model)  # a restart: same file, same thread budget, same CPU
    assert _drive(again.tuner, cost, 50) == [kept] * 50  # no probe: every step on the kept count
    # the kept choice is a start, not a pin: the next probe comes after the period, as after any probe
    used = _drive(again.tuner, cost, thread_tuner.PERIOD + PROBE_STEPS)
    assert set(used) == {1, 2} and again.tuner.choice(1) == kept


def test_choices_are_kept_per_thread_budget_and_model_file(model, tmp_path):
    _drive(_runner(model).tuner, {2: 3.0, 1: 1.0}, PROBE_STEPS)  # 1 thread kept for a budget of 2
    assert _drive(_runner(model, threads=4).tuner, {4: 1.0, 2: 1.5}, BLOCK)[0] == 2  # another budget: it probes
    other = write_artifact(make_tiny_llama(3), tmp_path / "other.modelc")
    assert _drive(_runner(other).tuner, {2: 1.0, 1: 1.5}, BLOCK) == [1] * BLOCK  # another file: it probes


def test_a_runner_on_other_kernels_keeps_no_choice_until_it_is_on_numba(model):
    """A cold start's hybrid kernels (here the references) time other code: their choice is not kept."""
    runner = _runner(model, kernels=kernel_set("ref"))
    assert runner.tuner.memory is None
    runner.rebuild_on_numba()
    assert runner.tuner.memory is not None


@pytest.mark.parametrize(
    "content",
    [
        b"\xff\xfe not json",
        b"",
        b"[1, 2]",
        b'{"format": 2, "choices": {"1": 1}}',  # another format
        b'{"format": 1, "choices": {"1": 7}}',  # a count this tuner does not run
        b'{"format": 1, "choices": {"1": "1", "x": 1, "-1": 1}}',
        b'{"format": 1, "choices": [1]}',
        json.dumps({"format": 1, "choices": {"1": 1}, "pad": "x" * thread_choice.MAX_BYTES}).encode(),  # too long
    ],
)
def test_a_corrupt_or_foreign_choice_file_is_ignored(model, content):
    memory = thread_choice.for_source(open_artifact(model), 2)
    memory.path.parent.mkdir(parents=True)
    memory.path.write_bytes(content)
    runner = _runner(model)
    assert _drive(runner.tuner, {2: 1.0, 1: 1.5}, BLOCK) == [1] * BLOCK  # no kept choice: it probes at once
    _drive(runner.tuner, {2: 1.0, 1: 1.5}, PROBE_STEPS)
    assert thread_choice.ChoiceFile(memory.path).load() == {1: 2}  # the probe's choice replaced it


def test_an_unreadable_or_unwritable_choice_file_is_no_error(model, tmp_path):
    memory = thread_choice.for_source(open_artifact(model), 2)
    memory.path.mkdir(parents=True)  # a folder where the file would be: reading and replacing it fail
    runner = _runner(model)
    _drive(runner.tuner, {2: 1.0, 1: 1.5}, PROBE_STEPS + 1)
    assert runner.tuner.choice(1) == 2 and memory.path.is_dir()
    assert not list(memory.path.parent.glob("*.modelc-tmp"))  # no temp file left behind
    assert thread_choice.for_source(make_tiny_llama(2), 2) is None  # a model that is not a file keeps nothing


def test_choice_files_are_pruned_to_the_most_recent(tmp_path, monkeypatch):
    monkeypatch.setattr(thread_choice, "KEEP", 2)
    for i in range(4):
        thread_choice.ChoiceFile(tmp_path / f"{i}.json").save({1: 2})
        os.utime(tmp_path / f"{i}.json", (i, i))  # written in this order
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["2.json", "3.json"]
