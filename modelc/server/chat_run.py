"""Running one validated ChatPlan (openai_chat.parse_chat) for the chat surfaces that are not chat
completions: the Anthropic Messages API and the OpenAI Responses API. They translate their request
into a chat-completions body, so the template, tools, constraints and sampling are the one pipeline of
openai_chat.py; this module runs the plan's first choice and hands back text as it streams.

No response shapes here: each surface writes its own frames from a ChatStream.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import Any

from quart import Response

from modelc.errors import ModelcError
from modelc.server.generation import ChoiceResult, ChoiceStreams, Timings, apply_finish, collect, is_finished
from modelc.server.handling import RequestRecord, account, deadline, record
from modelc.server.openai_chat import ChatPlan
from modelc.server.state import ServerState
from modelc.server.streaming import events_from, guarded, open_streams, sse_response
from modelc.tokenizer.reasoning import ReasoningSplitter


async def run_chat(state: ServerState, engine: Any, plan: ChatPlan) -> ChoiceResult:
    """Generate the plan's (single) choice to the end and account it on the request record."""
    rec = record()
    rec.inference = True
    timings = Timings(start=rec.start)
    state.acquire_slot()
    try:
        results = await collect(engine, plan.jobs[:1], rec.request_id, deadline(state), timings)
    finally:
        state.release_slot()
    account(state, rec, results, [len(plan.prompt_token_ids)], timings)
    return results[0]


class ChatStream:
    """One running choice: `async for text in cs.texts()` yields each token's text (the result fills in
    as it goes, finish reason included); `cs.account()` then fills the record's token counts."""

    def __init__(
        self, state: ServerState, rec: RequestRecord, plan: ChatPlan, streams: ChoiceStreams, first: Any
    ) -> None:
        self.state = state
        self.rec = rec
        self.plan = plan
        self.streams = streams
        self.first = first
        self.timings = Timings(start=rec.start)
        self.result = ChoiceResult(index=0, prompt_tokens=len(plan.prompt_token_ids))
        self.prompt_lens = [len(plan.prompt_token_ids)]

    async def texts(self) -> AsyncIterator[str]:
        async for _, ev in events_from(self.first, self.streams):
            if is_finished(ev):
                apply_finish(self.result, ev)
                continue
            self.timings.on_token()
            self.result.add_token(ev)
            if ev.text:
                yield ev.text

    async def parts(self) -> AsyncIterator[tuple[str, str]]:
        """(reasoning delta, content delta) per token, the model's thoughts apart from its answer
        (modelc.tokenizer.reasoning, as chat completions' reasoning_content); the held-back rest last."""
        splitter = ReasoningSplitter(
            getattr(self.plan, "reasoning", None), in_reasoning=getattr(self.plan, "in_reasoning", False)
        )
        async for text in self.texts():
            thought, said = splitter.feed(text)
            if thought or said:
                yield thought, said
        thought, said = splitter.finish()
        if thought or said:
            yield thought, said

    def account(self) -> RequestRecord:
        account(self.state, self.rec, [self.result], self.prompt_lens, self.timings)
        return self.rec


async def stream_chat(
    state: ServerState,
    engine: Any,
    plan: ChatPlan,
    frames: Callable[[ChatStream], AsyncGenerator[bytes, None]],
    error_frames: Callable[[ModelcError], Sequence[bytes]],
) -> Response:
    """Open the engine stream (errors before the first token are real HTTP statuses) and answer with
    the SSE body `frames(cs)`; an error after that ends the body with `error_frames(e)`."""
    rec = record()
    rec.inference = True
    streams, first = await open_streams(state, engine, plan.jobs[:1], rec)
    cs = ChatStream(state, rec, plan, streams, first)

    async def body() -> AsyncIterator[bytes]:
        async for frame in guarded(
            state, rec, streams, frames(cs), error_frames, [cs.result], cs.prompt_lens, cs.timings
        ):
            yield frame

    return sse_response(state, rec, streams, body())


def named_event(event: str, payload: dict[str, Any]) -> bytes:
    """An SSE frame with an `event:` line (Anthropic and Responses streams name every event)."""
    import json

    data = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return f"event: {event}\ndata: {data}\n\n".encode()


def matched_stop(tokenizer: Any, result: ChoiceResult, stops: Sequence[str]) -> str | None:
    """Which stop string ended a choice, if one did: the stop text is cut from result.text, but the
    tokens that spelled it were generated, so their decoded text continues with it."""
    if result.finish_reason != "stop" or not stops:
        return None
    try:
        full = tokenizer.decode(result.token_ids)
    except Exception:  # a tokenizer that cannot decode these ids: no stop string to name
        return None
    if not full.startswith(result.text):
        return None
    tail = full[len(result.text) :]
    return next((s for s in stops if tail.startswith(s)), None)
