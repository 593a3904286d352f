"""The body of a streamed response (StreamBody) and how an OpenAI-style stream ends on an error.
RequestRun (server/run.py) opens the streams and builds the response around them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

from modelc.errors import ModelcError
from modelc.server.errors import error_body
from modelc.server.sse import DONE, sse_event


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
