"""StreamBody: cleanup runs once whether the stream ran, was closed unstarted, or was dropped unsent."""

from __future__ import annotations

import asyncio
import gc

import pytest

from modelc.server.streaming import StreamBody

pytestmark = pytest.mark.anyio


def make(log: list[str]) -> StreamBody:
    async def gen():
        try:
            yield b"a"
            yield b"b"
        finally:
            log.append("generator finally")

    async def abandon() -> None:
        log.append("abandoned")

    return StreamBody(gen(), abandon)


async def test_started_stream_cleans_up_in_its_generator() -> None:
    log: list[str] = []
    body = make(log)
    assert [x async for x in body] == [b"a", b"b"]
    await body.aclose()
    assert log == ["generator finally"]


async def test_closed_before_start_runs_abandon() -> None:
    log: list[str] = []
    body = make(log)
    await body.aclose()
    await body.aclose()
    assert log == ["abandoned"]


async def test_dropped_unsent_runs_abandon() -> None:
    log: list[str] = []
    body = make(log)
    del body
    gc.collect()
    for _ in range(3):
        await asyncio.sleep(0)
    assert log == ["abandoned"]
