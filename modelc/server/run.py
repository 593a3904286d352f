"""RequestRun: one inference request from its concurrency slot to its log line.

Every inference route is parse -> run -> format; this is the "run". It owns what every route used
to repeat by hand: the concurrency slot (--max-concurrent), the deadline (--request-timeout), the
engine streams of its choices (generation.ChoiceStreams), the per-choice results and timings, and
the accounting (prompt/completion token metrics and the request's log record, handling.account).

    run = RequestRun(state, engine, jobs, prompt_lens)
    results = await run.collect()                      # a whole answer, accounted

    await run.start()                                  # streamed: 503/400/408 before the first byte
    return run.respond(frames(run), error_frames)      # frames iterate `run.events()`

    async with run.slot():                             # embeddings, rerank, infer
        out = await engine.embed(ids)
    run.count_prompt(num_tokens)

The slot is released and the streams closed exactly once, however the request ends: answered,
failed, timed out, or the client gone (mid-stream, or before the first byte was sent).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence

import anyio
from quart import Response

from modelc.errors import ModelcError
from modelc.request import Finished, GenerateEvent
from modelc.server.generation import LIVE, ChoiceResult, ChoiceStreams, Job, Timings
from modelc.server.handling import RequestRecord, account, deadline, finish_record, record
from modelc.server.served import ServedModel
from modelc.server.sse import SSE_HEADERS
from modelc.server.state import ServerState
from modelc.server.streaming import StreamBody


class EngineCall:
    """One slot's engine work, cancelled by interrupt() (the drain timeout) at its next await."""

    def __init__(self) -> None:
        self.scope = anyio.CancelScope()
        self.error: ModelcError | None = None

    def interrupt(self, error: ModelcError) -> None:
        if self.error is None:
            self.error = error
        self.scope.cancel()


class RequestRun:
    def __init__(
        self,
        state: ServerState,
        engine: ServedModel,
        jobs: Sequence[Job] = (),
        prompt_lens: Sequence[int] | None = None,
        *,
        start: float | None = None,
        rec: RequestRecord | None = None,
    ) -> None:
        self.state = state
        self.engine = engine
        self.rec = rec if rec is not None else record()
        self.rec.inference = True
        self.jobs = list(jobs)
        # prompt tokens as the API counts them: once per prompt (n choices of one prompt count it once)
        self.prompt_lens = list(prompt_lens) if prompt_lens is not None else [len(j.prompt_token_ids) for j in jobs]
        self.timings = Timings(start=self.rec.start if start is None else start)
        self.results = [ChoiceResult(index=i, prompt_tokens=len(j.prompt_token_ids)) for i, j in enumerate(jobs)]
        self._streams: ChoiceStreams | None = None
        self._first: tuple[int, GenerateEvent] | None = None
        self._holds_slot = False

    # -- the slot --------------------------------------------------------------------------------

    def _acquire(self) -> None:
        self.state.acquire_slot()
        self._holds_slot = True

    def _release(self) -> None:
        if self._holds_slot:
            self._holds_slot = False
            self.state.release_slot()

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold a concurrency slot for engine work that is not a generation (embed, rerank, infer).
        The server's drain may end the work inside (interrupt_all): it then raises that error (503
        shutting_down), as a generation cut by the drain does."""
        self._acquire()
        call = EngineCall()
        try:
            with call.scope:
                LIVE.add(call)
                yield
            if call.error is not None:
                raise call.error
        finally:
            LIVE.discard(call)
            self._release()

    def count_prompt(self, num_tokens: int) -> None:
        """Account the input tokens of an encoder request (embeddings, rerank)."""
        self.rec.prompt_tokens = num_tokens
        self.state.metrics.prompt_tokens.inc(num_tokens)
        self.state.metrics.prompt_hist.observe(num_tokens)

    # -- generation ------------------------------------------------------------------------------

    async def collect(self) -> list[ChoiceResult]:
        """Generate every choice to the end (results in job order) and account the request."""
        try:
            await self.start()
            async for _ in self.events():
                pass
        finally:
            await self.close()
        self.account()
        return self.results

    async def start(self) -> None:
        """Take a slot, open the engine streams and wait for the first event: overload, bad input and
        timeouts before it are errors the route answers with a real HTTP status."""
        self._acquire()
        try:
            self._streams = ChoiceStreams(self.engine, self.jobs, self.rec.request_id, deadline(self.state))
            await self._streams.__aenter__()
            self._first = await anext(self._streams)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.close()
            raise

    async def events(self) -> AsyncIterator[tuple[int, GenerateEvent]]:
        """(choice index, TokenEvent | Finished) in arrival order; each is already applied to
        self.results[index] and self.timings. Every step awaits, so a busy stream never starves the loop."""
        assert self._streams is not None, "start() first"
        if self._first is not None:
            first, self._first = self._first, None
            yield self._apply(first)
        async for item in self._streams:
            await anyio.sleep(0)
            yield self._apply(item)

    def _apply(self, item: tuple[int, GenerateEvent]) -> tuple[int, GenerateEvent]:
        i, ev = item
        if isinstance(ev, Finished):
            self.results[i].finish(ev)
        else:
            self.timings.on_token()
            self.results[i].add_token(ev)
        return item

    def account(self) -> RequestRecord:
        """Fill the record and the token metrics from the results (once; later calls do nothing)."""
        account(self.state, self.rec, self.results, self.prompt_lens, self.timings)
        return self.rec

    async def close(self) -> None:
        """Close the engine streams (aborting unfinished choices) and release the slot; idempotent."""
        try:
            if self._streams is not None:
                streams, self._streams = self._streams, None
                await streams.close()
        finally:
            self._release()

    # -- streamed responses ----------------------------------------------------------------------

    def respond(
        self,
        frames: AsyncGenerator[bytes, None],
        error_frames: Callable[[ModelcError], Sequence[bytes]],
        *,
        content_type: str | None = None,
    ) -> Response:
        """The streaming Response whose body is `frames` (which iterates self.events()). A ModelcError
        in it ends the body with error_frames(e); any other end (the client went away, the server is
        closing) accounts what was generated so far. In every case the streams and the slot are
        released and the log line written, also when the body is never started."""
        self.rec.streaming = True
        body = StreamBody(self._guarded(frames, error_frames), self._abandon)
        if content_type is None:
            return Response(body, headers=SSE_HEADERS)
        return Response(body, content_type=content_type)

    async def _guarded(
        self, frames: AsyncGenerator[bytes, None], error_frames: Callable[[ModelcError], Sequence[bytes]]
    ) -> AsyncIterator[bytes]:
        status = 200
        rec = self.rec
        try:
            async for frame in frames:
                yield frame
        except ModelcError as e:
            status, rec.error = e.http_status, e.message
            for frame in error_frames(e):
                yield frame
        except BaseException:
            # The client went away (the generator is closed or cancelled): nginx's 499, as docs promise.
            status, rec.error = 499, "client closed the stream before the end"
            self.account()
            raise
        finally:
            try:
                await frames.aclose()
            finally:
                with anyio.CancelScope(shield=True):
                    await self.close()
                finish_record(self.state, rec, status)

    async def _abandon(self) -> None:
        self.rec.error = "client went away before the stream started"
        try:
            await self.close()
        finally:
            finish_record(self.state, self.rec, 499)
