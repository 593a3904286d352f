"""The lifecycle enums of the request side (STYLE.md: ordered so "done" is one comparison): a request's
record (RecordState) and its choice streams (StreamsState) walk their states once, in order."""

from __future__ import annotations

import anyio
import pytest

from modelc.errors import OverloadedError
from modelc.request import SamplingParams
from modelc.server import run_host
from modelc.server.generation import ChoiceStreams, Job, StreamsState
from modelc.server.handling import RecordState, RequestRecord, account, finish_record
from modelc.server.state import ServerState
from tests.server.fake_engine import FakeEngine

pytestmark = pytest.mark.anyio


def test_a_record_is_accounted_then_logged_once() -> None:
    state = ServerState(FakeEngine())
    rec = RequestRecord("r-1", "POST", "/v1/chat/completions")
    assert rec.state is RecordState.OPEN
    account(state, rec, [], [7], _timings())
    assert rec.state is RecordState.ACCOUNTED and rec.prompt_tokens == 7
    account(state, rec, [], [99], _timings())  # once: a second account changes nothing
    assert rec.prompt_tokens == 7
    finish_record(state, rec, 200)
    finish_record(state, rec, 499)
    assert rec.state is RecordState.LOGGED
    text = state.metrics.exposition().decode()
    assert 'modelc_requests_total{route="/v1/chat/completions",status="200"} 1.0' in text
    assert 'status="499"' not in text  # logged and counted once, with the first status


def test_a_record_may_be_logged_without_tokens() -> None:
    state = ServerState(FakeEngine())
    rec = RequestRecord("r-2", "POST", "/v1/embeddings")
    finish_record(state, rec, 400)
    assert rec.state is RecordState.LOGGED and rec.state >= RecordState.ACCOUNTED  # nothing more happens to it


def _timings():
    from modelc.server.generation import Timings

    return Timings()


async def test_choice_streams_open_finish_and_close() -> None:
    engine = FakeEngine()
    jobs = [Job((5, 6, 7), SamplingParams(temperature=0.0, max_tokens=3))] * 2
    async with anyio.create_task_group() as tg:
        await tg.start(run_host.serve)
        cs = ChoiceStreams(engine, jobs, "r-3", None)
        assert cs.state is StreamsState.NEW
        async with cs:
            assert cs.state is StreamsState.OPEN
            events = [ev async for ev in cs]
        assert cs.state is StreamsState.CLOSED and len(events) == 2 * 4  # 3 tokens and a Finished each
        tg.cancel_scope.cancel()


async def test_an_interrupted_stream_raises_its_error_then_closes() -> None:
    engine = FakeEngine(delay_s=0.01)
    jobs = [Job((5, 6, 7), SamplingParams(temperature=0.0, max_tokens=1000))]
    async with anyio.create_task_group() as tg:
        await tg.start(run_host.serve)
        async with ChoiceStreams(engine, jobs, "r-4", None) as cs:
            await anext(cs)
            cs.interrupt(OverloadedError("the server is shutting down"))
            assert cs.state is StreamsState.INTERRUPTED and cs.state >= StreamsState.INTERRUPTED
            with pytest.raises(OverloadedError, match="shutting down"):
                await anext(cs)
        assert cs.state is StreamsState.CLOSED and engine.aborted
        with pytest.raises(OverloadedError):
            await anext(cs)  # still the drain's error, not "ended without a finish event"
        tg.cancel_scope.cancel()
