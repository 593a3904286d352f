"""Starting a streamed generation: hold a concurrency slot, open the engine streams and wait for the
first event *before* answering, so overload, bad input and timeouts are real HTTP statuses (503/400/408)
rather than errors inside a 200 stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from quart import Response

from modelc.errors import ModelcError
from modelc.server.errors import error_body
from modelc.server.generation import ChoiceResult, ChoiceStreams, Job, Timings
from modelc.server.handling import RequestRecord, account, deadline, finish_record
from modelc.server.sse import DONE, SSE_HEADERS, sse_event
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


async def guarded(
    state: ServerState,
    rec: RequestRecord,
    streams: ChoiceStreams,
    body: AsyncGenerator[bytes, None],
    error_frames: Callable[[ModelcError], Sequence[bytes]],
    results: list[ChoiceResult],
    prompt_lens: list[int],
    timings: Timings,
) -> AsyncIterator[bytes]:
    """The frames of `body`, then the common end of every streamed route: a ModelcError ends the stream
    with error_frames(e) (the status is logged as the error's); any other end (the client went away, the
    server is closing) accounts what was generated so far (handling.account over results, prompt_lens,
    timings: the body accounts a stream that ran to the end) and propagates; in every case the engine
    streams and the concurrency slot are released and the request's log line is written."""
    status = 200
    try:
        async for frame in body:
            yield frame
    except ModelcError as e:
        status, rec.error = e.http_status, e.message
        for frame in error_frames(e):
            yield frame
    except BaseException:
        # The client went away (the generator is closed or cancelled): nginx's 499, as docs promise.
        status, rec.error = 499, "client closed the stream before the end"
        account(state, rec, results, prompt_lens, timings)
        raise
    finally:
        try:
            await body.aclose()
        finally:
            await finish_streams(state, streams)
            finish_record(state, rec, status)


def openai_error_frames(e: ModelcError) -> tuple[bytes, ...]:
    """How an OpenAI-style SSE stream ends on an error: the error body as an event, then [DONE]."""
    return sse_event(error_body(e)), DONE


_abandoned: set[asyncio.Task[None]] = set()  # cleanup tasks of bodies dropped unsent (kept alive here)


class StreamBody:
    """The SSE body handed to Quart. A generator's `finally` does the cleanup once it has started;
    if the client goes away after the route returned but before the first chunk, the generator never
    starts and its `finally` never runs, so this wrapper runs `on_abandon` instead (on aclose, or
    when the unsent response is dropped): the slot and the engine sequences are always released."""

    def __init__(self, gen: AsyncIterator[bytes], on_abandon: Callable[[], Awaitable[None]]) -> None:
        self._gen = gen
        self._on_abandon = on_abandon
        self._started = False
        self._closed = False

    def __aiter__(self) -> StreamBody:
        return self

    async def __anext__(self) -> bytes:
        self._started = True
        return await self._gen.__anext__()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._started:
            await self._gen.aclose()
        else:
            await self._on_abandon()

    def __del__(self) -> None:
        if self._started or self._closed:
            return
        self._closed = True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop left: the process is ending
        task = loop.create_task(self._on_abandon())
        _abandoned.add(task)
        task.add_done_callback(_abandoned.discard)


def sse_response(state: ServerState, rec: RequestRecord, streams: ChoiceStreams, gen: AsyncIterator[bytes]) -> Response:
    """The streaming Response for `gen` (which cleans up in its own finally once started)."""

    async def abandon() -> None:
        rec.error = "client went away before the stream started"
        try:
            await finish_streams(state, streams)
        finally:
            finish_record(state, rec, 499)

    rec.streaming = True
    return Response(StreamBody(gen, abandon), headers=SSE_HEADERS)
