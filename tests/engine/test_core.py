"""EngineCore.step(): schedule -> execute -> update in one call, and the runner forgets ended sequences."""

from __future__ import annotations

from modelc.engine.core import EngineCore
from modelc.scheduler.output import SequenceFinished, TokenEmitted
from tests.scheduler.fakes import FakeRunner, make_scheduler, make_sequence


def test_step_runs_sequences_to_their_end_and_releases_their_state():
    runner = FakeRunner()
    core = EngineCore(make_scheduler(max_batch_tokens=32, max_num_seqs=4), runner)
    for i in range(3):
        core.add(make_sequence(i, prompt_len=20 + i, max_tokens=5))
    tokens: dict[int, int] = {}
    finished: dict[int, str] = {}
    steps = 0
    while core.has_work:
        for ev in core.step():
            if isinstance(ev, TokenEmitted):
                tokens[ev.seq_id] = tokens.get(ev.seq_id, 0) + 1
            if ev.finish is not None:
                finished[ev.seq_id] = ev.finish.finish_reason
        steps += 1
        assert steps < 100
    assert tokens == {0: 5, 1: 5, 2: 5} and set(finished.values()) == {"length"}
    assert runner.states  # the last plan carried no freed ids: the runner still holds the ended sequences
    assert core.step() == [] and not runner.states  # an idle step releases them


def test_abort_between_steps_and_an_idle_core():
    runner = FakeRunner()
    core = EngineCore(make_scheduler(), runner)
    assert core.step() == []
    core.add(make_sequence(7, prompt_len=10, max_tokens=50))
    assert any(isinstance(ev, TokenEmitted) for ev in core.step())
    (ev,) = core.abort(7)
    assert isinstance(ev, SequenceFinished) and ev.finish.finish_reason == "abort"
    core.release()
    assert not runner.states and not core.has_work
