"""Runs the engine for one HTTP request: n choices as tasks merged into one bounded stream, a deadline,
and the bookkeeping every route needs (text, token ids, logprobs, finish reason, usage, timings).

No HTTP here. Leaving a ChoiceStreams block (done, error, timeout or client disconnect) cancels
each choice's task, which leaves its engine iterator and so aborts that sequence. Every open
ChoiceStreams is in LIVE, so a server whose drain time is up can end them all with an error
(interrupt_all) rather than have them cut off mid-stream.
"""

from __future__ import annotations

import contextlib
import enum
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from modelc.errors import EngineError, ModelcError, RequestTimeoutError
from modelc.request import Finished, GenerateEvent, SamplingParams, TokenEvent
from modelc.server import run_host
from modelc.server.served import ServedModel

STREAM_BUFFER = 64  # events buffered per request before the pumps wait for the reader
# Open engine work of this process that a drain may end: every ChoiceStreams, and the engine calls of
# embeddings, rerank and /infer (server/run.EngineCall). Each has interrupt(error).
LIVE: weakref.WeakSet[Any] = weakref.WeakSet()


def interrupt_all(error: ModelcError) -> int:
    """End every open ChoiceStreams and engine call with `error` (the drain timeout): streams at their
    next event, engine calls at their next await. Returns how many."""
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

    def add_token(self, ev: TokenEvent) -> None:
        self.token_ids.append(ev.token_id)
        self.token_texts.append(ev.text)
        self.text += ev.text
        self.logprobs.append(ev.logprob)
        self.top_logprobs.append(best_first(ev.top_logprobs))

    def finish(self, ev: Finished) -> None:
        self.finish_reason = ev.finish_reason
        self.cached_tokens = ev.cached_tokens
        self.queue_time_s = ev.queue_time_s


def best_first(top: tuple[tuple[int, float], ...]) -> list[tuple[int, float]]:
    """TokenEvent.top_logprobs as [(token_id, logprob)], the most likely first."""
    return sorted(top, key=lambda p: -p[1])


class StreamsState(enum.IntEnum):
    """Where a ChoiceStreams stands; `state >= INTERRUPTED`: no more engine events will be read."""

    NEW = 0  # made: no pump runs yet (entering the block starts them)
    OPEN = 1  # the pumps run: events arrive until every choice has finished
    INTERRUPTED = 2  # a drain ended it (interrupt): the pumps are cancelled, the next read raises its error
    CLOSED = 3  # left: the pumps are cancelled and done (every abort sent), the stream closed


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
        self._send, self._receive = anyio.create_memory_object_stream[tuple[int, GenerateEvent | ModelcError]](
            max_buffer_size=STREAM_BUFFER + len(self._jobs)
        )
        self._scope: anyio.CancelScope | None = None
        self._done = anyio.Event()
        self.state = StreamsState.NEW
        self._error: ModelcError | None = None  # what an interrupt ends the reading with
        self._num_open = len(self._jobs)

    async def __aenter__(self) -> ChoiceStreams:
        self._scope = anyio.CancelScope()
        await run_host.start_soon(self._pump_all)
        self.state = StreamsState.OPEN
        LIVE.add(self)
        return self

    def interrupt(self, error: ModelcError) -> None:
        """Make the next __anext__ raise `error` (whatever the choices are doing): the pumps are
        cancelled, and the reader finds the stream ended with this error set."""
        if self._error is None:
            self._error = error
        if self.state is StreamsState.OPEN:
            self.state = StreamsState.INTERRUPTED
        if self._scope is not None:
            self._scope.cancel()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        LIVE.discard(self)
        if self._scope is not None:
            self._scope.cancel()
        if StreamsState.OPEN <= self.state < StreamsState.CLOSED:
            # Shielded so a cancelled caller still waits for every abort to be sent.
            with anyio.CancelScope(shield=True):
                await self._done.wait()
        self.state = StreamsState.CLOSED
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
            item: tuple[int, GenerateEvent | ModelcError] = (index, e)
        except Exception as e:  # an engine bug: end this request with a clear error, keep serving
            item = (index, EngineError(f"generation failed: {type(e).__name__}: {e}"))
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await self._send.send(item)

    def __aiter__(self) -> ChoiceStreams:
        return self

    async def __anext__(self) -> tuple[int, GenerateEvent]:
        if self._num_open == 0:
            raise StopAsyncIteration
        if self._error is not None:
            raise self._error
        try:
            if self._deadline is None:
                index, ev = await self._receive.receive()
            else:
                with anyio.fail_after(max(self._deadline - time.monotonic(), 0.0)):
                    index, ev = await self._receive.receive()
        except TimeoutError:
            raise RequestTimeoutError("request timed out; its generation was aborted") from None
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            if self._error is not None:
                raise self._error from None
            raise EngineError("generation ended without a finish event") from None
        if isinstance(ev, ModelcError):
            raise ev
        if isinstance(ev, Finished):
            self._num_open -= 1
            if ev.finish_reason == "error":
                raise EngineError(ev.error or "generation failed in the engine")
        elif not isinstance(ev, TokenEvent):  # the engine broke the contract (modelc.request's events only)
            raise EngineError(f"generation yielded a {type(ev).__name__}, not a TokenEvent or Finished")
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
