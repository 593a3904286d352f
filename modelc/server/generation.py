"""Runs the engine for one HTTP request: n choices as tasks merged into one bounded stream, a deadline,
and the bookkeeping every route needs (text, token ids, logprobs, finish reason, usage, timings).

No HTTP here. Leaving a ChoiceStreams block (done, error, timeout or client disconnect) cancels
each choice's task, which leaves its engine iterator and so aborts that sequence. Every open
ChoiceStreams is in LIVE, so a server whose drain time is up can end them all with an error
(interrupt_all) rather than have them cut off mid-stream.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from modelc.errors import EngineError, ModelcError, RequestTimeoutError
from modelc.request import SamplingParams
from modelc.server import run_host
from modelc.server.served import ServedModel

STREAM_BUFFER = 64  # events buffered per request before the pumps wait for the reader
LIVE: weakref.WeakSet[ChoiceStreams] = weakref.WeakSet()  # open ChoiceStreams of this process


def interrupt_all(error: ModelcError) -> int:
    """End every open ChoiceStreams with `error` at its next event (the drain timeout). Returns how many."""
    live = list(LIVE)
    for streams in live:
        streams.interrupt(error)
    return len(live)


@dataclass(frozen=True, slots=True)
class Job:
    """One choice to generate: its prompt and its sampling parameters."""

    prompt_token_ids: tuple[int, ...]
    params: SamplingParams


@dataclass(slots=True)
class ChoiceResult:
    """Everything one finished (or running) choice produced, in order."""

    index: int
    prompt_tokens: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    token_texts: list[str] = field(default_factory=list)  # the text each token added (may be "")
    logprobs: list[float | None] = field(default_factory=list)
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    finish_reason: str | None = None
    cached_tokens: int = 0
    queue_time_s: float | None = None  # when the engine reports it (Finished.queue_time_s)

    @property
    def cumulative_logprob(self) -> float:
        return float(sum(lp for lp in self.logprobs if lp is not None))

    def add_token(self, ev: Any) -> None:
        self.token_ids.append(int(ev.token_id))
        self.token_texts.append(ev.text or "")
        self.text += ev.text or ""
        self.logprobs.append(None if ev.logprob is None else float(ev.logprob))
        self.top_logprobs.append(normalize_top(getattr(ev, "top_logprobs", None)))


def normalize_top(top: Any) -> list[tuple[int, float]]:
    """TokenEvent.top_logprobs as [(token_id, logprob)] best first (accepts pairs or a {id: lp} map)."""
    if not top:
        return []
    items = top.items() if isinstance(top, dict) else top
    return sorted(((int(t), float(lp)) for t, lp in items), key=lambda p: -p[1])


def is_finished(ev: Any) -> bool:
    return getattr(ev, "finish_reason", None) is not None and not hasattr(ev, "token_id")


class ChoiceStreams:
    """`async with ChoiceStreams(engine, jobs, request_id, deadline) as cs: async for i, ev in cs: ...`

    Yields (choice index, TokenEvent | Finished) as they come from any choice; raises the first
    engine error, RequestTimeoutError past the deadline (a time.monotonic() value, or None).

    Each choice is pumped by a task of one anyio task group into one bounded memory stream (a full
    stream makes the pumps wait: backpressure). The task group lives in the server's run host
    (modelc.server.run_host), not in the caller's task: a streamed response is opened by the route's
    task and read by the task that writes the body, so no cancel scope may belong to either.
    """

    def __init__(self, engine: ServedModel, jobs: Sequence[Job], request_id: str, deadline: float | None) -> None:
        self._engine = engine
        self._jobs = list(jobs)
        self._request_id = request_id
        self._deadline = deadline
        self._send, self._receive = anyio.create_memory_object_stream[tuple[int, Any]](
            max_buffer_size=STREAM_BUFFER + len(self._jobs)
        )
        self._scope: anyio.CancelScope | None = None
        self._done = anyio.Event()
        self._started = False
        self._interrupted: ModelcError | None = None
        self._num_open = len(self._jobs)

    async def __aenter__(self) -> ChoiceStreams:
        self._scope = anyio.CancelScope()
        await run_host.start_soon(self._pump_all)
        self._started = True
        LIVE.add(self)
        return self

    def interrupt(self, error: ModelcError) -> None:
        """Make the next __anext__ raise `error` (whatever the choices are doing): the pumps are
        cancelled, and the reader finds the stream ended with this error set."""
        if self._interrupted is None:
            self._interrupted = error
        if self._scope is not None:
            self._scope.cancel()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        LIVE.discard(self)
        if self._scope is not None:
            self._scope.cancel()
        if self._started:
            # Shielded so a cancelled caller still waits for every abort to be sent.
            with anyio.CancelScope(shield=True):
                await self._done.wait()
            self._started = False
        self._receive.close()

    async def _pump_all(self) -> None:
        try:
            async with self._send:
                with self._scope:
                    async with anyio.create_task_group() as tg:
                        for i, job in enumerate(self._jobs):
                            rid = self._request_id if len(self._jobs) == 1 else f"{self._request_id}-{i}"
                            tg.start_soon(self._pump, i, job, rid)
        finally:
            self._done.set()

    async def _pump(self, index: int, job: Job, request_id: str) -> None:
        try:
            async for ev in self._engine.generate(list(job.prompt_token_ids), job.params, request_id=request_id):
                await self._send.send((index, ev))
            return
        except anyio.get_cancelled_exc_class():
            raise
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return  # the reader is gone
        except ModelcError as e:
            item: tuple[int, Any] = (index, e)
        except Exception as e:  # an engine bug: end this request with a clear error, keep serving
            item = (index, EngineError(f"generation failed: {type(e).__name__}: {e}"))
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await self._send.send(item)

    def __aiter__(self) -> ChoiceStreams:
        return self

    async def __anext__(self) -> tuple[int, Any]:
        if self._num_open == 0:
            raise StopAsyncIteration
        if self._interrupted is not None:
            raise self._interrupted
        try:
            if self._deadline is None:
                index, ev = await self._receive.receive()
            else:
                with anyio.fail_after(max(self._deadline - time.monotonic(), 0.0)):
                    index, ev = await self._receive.receive()
        except TimeoutError:
            raise RequestTimeoutError("request timed out; its generation was aborted") from None
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            if self._interrupted is not None:
                raise self._interrupted from None
            raise EngineError("generation ended without a finish event") from None
        if isinstance(ev, ModelcError):
            raise ev
        if is_finished(ev):
            self._num_open -= 1
            if ev.finish_reason == "error":
                raise EngineError(getattr(ev, "error", None) or "generation failed in the engine")
        return index, ev


@dataclass(slots=True)
class Timings:
    """Per-request clock: arrival, first token, last token (time.monotonic)."""

    start: float = field(default_factory=time.monotonic)
    first_token: float | None = None
    last_token: float | None = None
    itl_s: list[float] = field(default_factory=list)

    def on_token(self) -> None:
        now = time.monotonic()
        if self.first_token is None:
            self.first_token = now
        elif self.last_token is not None:
            self.itl_s.append(now - self.last_token)
        self.last_token = now


def apply_finish(result: ChoiceResult, ev: Any) -> None:
    result.finish_reason = ev.finish_reason
    result.cached_tokens = int(getattr(ev, "cached_tokens", 0) or 0)
    q = getattr(ev, "queue_time_s", None)
    result.queue_time_s = None if q is None else float(q)


async def collect(
    engine: ServedModel, jobs: Sequence[Job], request_id: str, deadline: float | None, timings: Timings
) -> list[ChoiceResult]:
    """Run every job to the end; results in job order."""
    results = [ChoiceResult(index=i, prompt_tokens=len(j.prompt_token_ids)) for i, j in enumerate(jobs)]
    async with ChoiceStreams(engine, jobs, request_id, deadline) as streams:
        async for i, ev in streams:
            if is_finished(ev):
                apply_finish(results[i], ev)
            else:
                timings.on_token()
                results[i].add_token(ev)
    return results
