"""RequestActor: one per generate() call. Sends AddSequence, turns the scheduler's events into
TokenEvent/Finished: incremental detokenization, stop strings matched on text (the stop text is
never returned), logprobs only when asked. Runs in the caller's task; leaving early aborts.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio

from modelc.actors.mailbox import Address, open_mailbox
from modelc.actors.messages import (
    AbortAcked,
    AbortSequence,
    AddSequence,
    SequenceAccepted,
    SequenceFinished,
    SequenceRejected,
    TokenEmitted,
)
from modelc.errors import EngineError
from modelc.request import Finished, SamplingParams, TokenEvent
from modelc.scheduler.batch import SampledToken
from modelc.tokenizer.stop import TextStream


class RequestState(enum.IntEnum):
    """Where one request stands with the scheduler; `state >= ENDED`: the scheduler holds nothing of it."""

    NEW = 0  # made: AddSequence not sent yet
    LIVE = 1  # the scheduler holds the sequence (accepted, or about to answer) and has not ended it
    ENDED = 2  # the scheduler no longer holds it: it ended it, refused it or acked our abort
    FINISHED = 3  # the caller got its Finished: nothing more comes


class RequestActor:
    def __init__(
        self,
        seq_id: int,
        prompt_token_ids: Sequence[int],
        params: SamplingParams,
        scheduler: Address,
        *,
        tokenizer: Any = None,
        abort_timeout_s: float = 10.0,
    ) -> None:
        self.seq_id = seq_id
        self.prompt: tuple[int, ...] = tuple(int(t) for t in prompt_token_ids)
        self.params = params
        self.scheduler = scheduler
        self.abort_timeout_s = abort_timeout_s
        # Room for every event one sequence can get: accepted, max_tokens tokens, finished, abort ack.
        self.address, self.inbox = open_mailbox(params.max_tokens + 4)
        self.text = TextStream(tokenizer, self.prompt, params.stop)
        self.num_tokens = 0
        self.state = RequestState.NEW
        self.end: Finished | None = None  # the scheduler's account of the end
        self.finished: Finished | None = None  # the Finished the caller gets (set once it is known)

    async def events(self) -> AsyncIterator[TokenEvent | Finished]:
        """Yield TokenEvents then one Finished. Raises the rejection (OverloadedError...) at once."""
        try:
            try:
                await self.scheduler.send(AddSequence(self.seq_id, self.prompt, self.params, self.address))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                raise EngineError("the engine is not running") from None
            self.state = RequestState.LIVE
            async for msg in self.inbox:
                for ev in self.handle(msg):
                    yield ev
                if self.text.stopped and self.finished is None:
                    finish = await self._abort() if self.state is RequestState.LIVE else self.end
                    cached = finish.cached_tokens if finish is not None else 0
                    queued = finish.queue_time_s if finish is not None else None
                    self.finished = Finished("stop", len(self.prompt), self.num_tokens, cached, None, queued)
                if self.finished is not None:
                    self.state = RequestState.FINISHED
                    yield self.finished
                    return
            raise EngineError("the engine stopped before the request finished")
        finally:
            if self.state is RequestState.LIVE:
                with anyio.CancelScope(shield=True):
                    await self._abort()
            self.inbox.close()
            self.address.close()

    def handle(self, msg: object) -> list[TokenEvent]:
        """One scheduler event -> the TokenEvents to yield now (self.finished set at the end)."""
        match msg:
            case TokenEmitted(token=tok, stop_token=stop_token, finish=finish):  # first: every token's
                return self._token(tok, stop_token, finish)
            case SequenceAccepted():
                return []
            case SequenceRejected(error=error):
                self.state = RequestState.ENDED
                raise error
            case SequenceFinished(finish=finish):
                self._end(finish)
                return []
            case AbortAcked():
                return []
        raise TypeError(f"RequestActor got an unknown message {type(msg).__name__}")

    def _token(self, tok: SampledToken, stop_token: bool, finish: Finished | None) -> list[TokenEvent]:
        if self.text.stopped:
            return []  # tokens computed after the stop string, before the abort landed
        self.num_tokens += 1
        # A final EOS/stop token is counted but not shown; it carries only held-back text, if any.
        text = "" if stop_token else self.text.add(tok.token_id, check_stop=self.num_tokens > self.params.min_tokens)
        if finish is not None:
            text += self.text.flush()
            self._end(finish)
        if stop_token and not text:
            return []
        lp = tok.logprob if self.params.logprobs else None
        top = tuple(tok.top_logprobs) if self.params.logprobs and self.params.top_logprobs else ()
        return [TokenEvent(tok.token_id, text, lp, top)]

    def _end(self, finish: Finished) -> None:
        self.state = RequestState.ENDED
        self.end = finish
        if self.finished is None and not self.text.stopped:
            self.finished = finish  # the scheduler's Finished is the one the caller gets

    async def _abort(self) -> Finished | None:
        """Ask the scheduler to end the sequence; wait (bounded) for the ack. Returns its Finished."""
        finish = None
        with anyio.move_on_after(self.abort_timeout_s):
            try:
                await self.scheduler.send(AbortSequence(self.seq_id, self.address))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self.state = RequestState.ENDED
                return None
            async for msg in self.inbox:
                if isinstance(msg, AbortAcked):
                    finish = msg.finish
                    break
        self.state = RequestState.ENDED
        return finish
