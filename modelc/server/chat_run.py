"""Running one validated ChatPlan (openai_chat.parse_chat) for the chat surfaces that are not chat
completions: the Anthropic Messages API and the OpenAI Responses API. They translate their request
into a chat-completions body, so the template, tools, constraints and sampling are the one pipeline of
chat_plan.py; this module runs the plan's first choice and hands back text as it streams.

No response shapes here: each surface writes its own frames from a ChatStream.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import Any

from quart import Response

from modelc.errors import ModelcError
from modelc.request import TokenEvent
from modelc.server.chat_plan import ChatPlan
from modelc.server.generation import ChoiceResult
from modelc.server.handling import RequestRecord
from modelc.server.run import RequestRun
from modelc.server.served import ServedModel
from modelc.server.state import ServerState
from modelc.tokenizer.reasoning import ReasoningSplitter


async def run_chat(state: ServerState, engine: ServedModel, plan: ChatPlan) -> ChoiceResult:
    """Generate the plan's (single) choice to the end and account it on the request record."""
    results = await RequestRun(state, engine, plan.jobs[:1], [len(plan.prompt_token_ids)]).collect()
    return results[0]


class ChatStream:
    """One running choice: `async for text in cs.texts()` yields each token's text (the result fills in
    as it goes, finish reason included); `cs.account()` then fills the record's token counts."""

    def __init__(self, run: RequestRun, plan: ChatPlan) -> None:
        self.run = run
        self.plan = plan
        self.rec = run.rec
        self.timings = run.timings
        self.result = run.results[0]

    async def texts(self) -> AsyncIterator[str]:
        async for _, ev in self.run.events():
            if isinstance(ev, TokenEvent) and ev.text:
                yield ev.text

    async def parts(self) -> AsyncIterator[tuple[str, str]]:
        """(reasoning delta, content delta) per token, the model's thoughts apart from its answer
        (modelc.tokenizer.reasoning, as chat completions' reasoning_content); the held-back rest last."""
        splitter = ReasoningSplitter(self.plan.reasoning, in_reasoning=self.plan.in_reasoning)
        async for text in self.texts():
            thought, said = splitter.feed(text)
            if thought or said:
                yield thought, said
        thought, said = splitter.finish()
        if thought or said:
            yield thought, said

    def account(self) -> RequestRecord:
        return self.run.account()


async def stream_chat(
    state: ServerState,
    engine: ServedModel,
    plan: ChatPlan,
    frames: Callable[[ChatStream], AsyncGenerator[bytes, None]],
    error_frames: Callable[[ModelcError], Sequence[bytes]],
) -> Response:
    """Open the engine stream (errors before the first token are real HTTP statuses) and answer with
    the SSE body `frames(cs)`; an error after that ends the body with `error_frames(e)`."""
    run = RequestRun(state, engine, plan.jobs[:1], [len(plan.prompt_token_ids)])
    await run.start()
    return run.respond(frames(ChatStream(run, plan)), error_frames)


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
