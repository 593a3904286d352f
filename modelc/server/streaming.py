"""Starting a streamed generation: hold a concurrency slot, open the engine streams and wait for the
first event *before* answering, so overload, bad input and timeouts are real HTTP statuses (503/400/408)
rather than errors inside a 200 stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from modelc.server.generation import ChoiceStreams, Job
from modelc.server.handling import RequestRecord, deadline
from modelc.server.state import ServerState


async def open_streams(
    state: ServerState, engine: Any, jobs: Sequence[Job], rec: RequestRecord
) -> tuple[ChoiceStreams, tuple[int, Any]]:
    """Acquire a slot and return the running streams with their first event; the caller must
    `await finish_streams(state, streams)` when done (the stream generator's finally)."""
    state.acquire_slot()
    streams = ChoiceStreams(engine, jobs, rec.request_id, deadline(state))
    try:
        await streams.__aenter__()
        first = await anext(streams)
    except BaseException:
        await finish_streams(state, streams)
        raise
    return streams, first


async def finish_streams(state: ServerState, streams: ChoiceStreams) -> None:
    try:
        await streams.close()
    finally:
        state.release_slot()


async def events_from(first: tuple[int, Any], streams: ChoiceStreams) -> AsyncIterator[tuple[int, Any]]:
    """The primed first event, then the rest; every step awaits so a busy stream never starves the loop."""
    yield first
    async for item in streams:
        await asyncio.sleep(0)
        yield item
