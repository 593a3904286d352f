"""The task group that hosts the engine pumps of every running request (server/generation.py).

A streamed response is opened in the route's task and written by another task (Quart sends the
body from its own task), and a body dropped unsent is cleaned up from yet another; an anyio task
group must be entered and left in one task, so the pumps of a request cannot live in a task group
of the caller. They live here instead: one long-lived task per event loop owns a task group, and
each request's ChoiceStreams starts its pump group in it (with its own cancel scope, so closing a
request cancels only its pumps).

`serve()` (server/daemon.py) starts the host inside its root task group (`await tg.start(serve)`),
so on shutdown every pump is cancelled with the server. An app driven without serve() (Quart's test
client) gets a host started on first use, as a plain task of the running loop.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

_groups: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, TaskGroup] = weakref.WeakKeyDictionary()
_keep: set[asyncio.Task[None]] = set()  # hosts started on first use (kept alive here)


async def serve(*, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    """Host the request pumps of this event loop until cancelled (run it in the root task group)."""
    loop = asyncio.get_running_loop()
    try:
        async with anyio.create_task_group() as tg:
            _groups[loop] = tg
            task_status.started()
            await anyio.sleep_forever()
    finally:
        if _groups.get(loop) is tg:
            del _groups[loop]


async def start_soon(fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
    """Run fn(*args) as a task of this loop's host task group (starting the host if needed)."""
    loop = asyncio.get_running_loop()
    tg = _groups.get(loop)
    if tg is None:
        started = anyio.Event()

        async def host() -> None:
            await serve(task_status=_Started(started))

        task = loop.create_task(host())
        _keep.add(task)
        task.add_done_callback(_keep.discard)
        await started.wait()
        tg = _groups[loop]
    tg.start_soon(fn, *args)


class _Started:
    """A TaskStatus that sets an event (for the host started on first use)."""

    def __init__(self, event: anyio.Event) -> None:
        self._event = event

    def started(self, value: Any = None) -> None:
        self._event.set()
