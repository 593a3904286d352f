"""/api/pull for remote references (hf.co/..., ollama://..., pypi:...): modelc.pull in a worker thread,
its progress streamed as Ollama's NDJSON objects ({"status": "pulling manifest"}, {"status":
"downloading FILE", "digest", "total", "completed"}, ..., {"status": "success"}, or {"error": ...}).

Only the sources the operator allowed (`modelc run --allow-sources hf,ollama,pypi`; none by default)
may be used; any other is a 403 before anything is fetched. The request names a reference only: the
Hub endpoint, the Ollama registry and the package index come from the server's environment
(HF_ENDPOINT, MODELC_OLLAMA_REGISTRY, PIP_INDEX_URL), never from a request field.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
from quart import Response

from modelc import pull
from modelc.errors import ModelcError
from modelc.server.state import ServerState

NDJSON = "application/x-ndjson"
MIN_INTERVAL_S = 0.1  # progress objects per file at most this often (plus the last one)


def shape(event: pull.PullEvent) -> dict[str, Any]:
    out: dict[str, Any] = {"status": event.status}
    if event.digest is not None:
        out["digest"] = event.digest
    if event.total is not None:
        out["total"] = event.total
    if event.completed is not None:
        out["completed"] = event.completed
    return out


async def remote_pull(state: ServerState, name: str, body: dict[str, Any]) -> Any:
    """The /api/pull answer for a remote reference: a stream of progress objects, or one at the end."""
    try:
        ref = pull.parse(name)
    except pull.RefError as e:
        e.param = "model"
        raise
    pull.check_allowed(ref, state.config.allow_sources)
    if body.get("stream", True) is False:
        await anyio.to_thread.run_sync(pull.pull, ref)
        return {"status": "success"}
    return Response(_events(ref), content_type=NDJSON)


async def _events(ref: pull.Ref) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[pull.PullEvent | None] = asyncio.Queue()
    last: dict[str, float] = {}

    def report(event: pull.PullEvent) -> None:  # runs in the worker thread: throttled, handed to the loop
        if event.total is not None and event.completed is not None and event.completed < event.total:
            now = time.monotonic()
            if now - last.get(event.status, 0.0) < MIN_INTERVAL_S:
                return
            last[event.status] = now
        loop.call_soon_threadsafe(queue.put_nowait, event)

    async def run() -> None:
        try:
            await anyio.to_thread.run_sync(pull.pull, ref, report)
        finally:
            loop.call_soon_threadsafe(queue.put_nowait, None)

    task = asyncio.create_task(run())
    try:
        while (event := await queue.get()) is not None:
            yield (json.dumps(shape(event)) + "\n").encode()
        await task
    except ModelcError as e:
        yield (json.dumps({"error": e.message}) + "\n").encode()
    finally:
        if not task.done():
            task.cancel()
