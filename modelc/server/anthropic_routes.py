"""POST /v1/messages and /v1/messages/count_tokens: the Anthropic Messages API on the chat pipeline.

The body becomes a chat-completions body (anthropic_shapes.chat_body) and runs through
openai_chat.parse_chat; text streams as content_block_delta events; with tools offered the text is
buffered and split into text + tool_use blocks at the end (as chat completions does). Errors
come back in Anthropic's shape ({"type": "error", "error": {"type", "message"}}).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

from quart import Blueprint

from modelc.errors import ModelcError
from modelc.server import anthropic_shapes as shapes
from modelc.server import openapi_surfaces
from modelc.server.chat_plan import ChatPlan
from modelc.server.chat_run import ChatStream, matched_stop, named_event, run_chat, stream_chat
from modelc.server.handling import engine_for, get_state, offload, read_json, record
from modelc.server.openai_chat import parse_chat, split_reasoning_of, split_tool_calls
from modelc.server.served import ServedModel

OPENAPI_PATHS = openapi_surfaces.ANTHROPIC
bp = Blueprint("anthropic", __name__)


async def _plan(body: dict[str, Any], *, count_only: bool = False) -> tuple[Any, ChatPlan]:
    state = get_state()
    chat = shapes.chat_body(body, count_only=count_only)
    engine = await engine_for(state, chat.get("model"))
    return engine, await offload(parse_chat, state, engine, chat)  # templates and tokenizer: off the loop


def content_blocks(plan: ChatPlan, r: Any) -> tuple[list[dict[str, Any]], bool]:
    """The message's blocks (thinking, text, tool_use) and whether it called tools."""
    reasoning, _ = split_reasoning_of(plan, r)
    content, calls = split_tool_calls(plan, r)
    blocks: list[dict[str, Any]] = []
    if reasoning:
        blocks.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    if content or not calls:
        blocks.append({"type": "text", "text": content or ""})
    return blocks + [shapes.tool_use_block(c) for c in calls], bool(calls)


def _stops(body: dict[str, Any]) -> list[str]:
    return list(body.get("stop_sequences") or [])


@bp.post("/v1/messages")
async def messages() -> Any:
    state = get_state()
    body = await read_json()
    engine, plan = await _plan(body)
    if plan.stream:
        return await stream_chat(state, engine, plan, lambda cs: message_events(cs, engine, _stops(body)), error_frames)
    r = await run_chat(state, engine, plan)
    blocks, called = content_blocks(plan, r)
    stop = None if called else matched_stop(engine.tokenizer, r, _stops(body))
    rec = record()
    return shapes.message(
        shapes.new_message_id(),
        plan.model,
        blocks,
        shapes.stop_reason(r.finish_reason, stop, called),
        stop,
        shapes.usage(rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens),
    )


@bp.post("/v1/messages/count_tokens")
async def count_tokens() -> Any:
    body = await read_json()
    _, plan = await _plan(body, count_only=True)
    return {"input_tokens": len(plan.prompt_token_ids)}


def error_frames(e: ModelcError) -> tuple[bytes, ...]:
    return (named_event("error", shapes.error_body(e)),)


async def message_events(cs: ChatStream, engine: ServedModel, stops: list[str]) -> AsyncGenerator[bytes, None]:
    """message_start; a thinking block (the model's reasoning) and a text block streamed token by
    token (or, with tools, the buffered text and tool_use blocks at the end); message_delta with the
    stop reason and usage; message_stop."""
    plan = cs.plan
    start = shapes.message(
        shapes.new_message_id(), plan.model, [], None, None, shapes.usage(len(plan.prompt_token_ids), 0)
    )
    yield named_event("message_start", {"type": "message_start", "message": start})
    index = -1
    open_kind: str | None = None  # the kind of the block now open

    def switch(kind: str | None) -> list[bytes]:
        """Close the open block and open one of `kind` (None: just close)."""
        nonlocal index, open_kind
        out = []
        if open_kind is not None:
            out.append(named_event("content_block_stop", {"type": "content_block_stop", "index": index}))
        open_kind = kind
        if kind is not None:
            index += 1
            block = (
                {"type": "thinking", "thinking": "", "signature": ""}
                if kind == "thinking"
                else {"type": "text", "text": ""}
            )
            out.append(
                named_event(
                    "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}
                )
            )
        return out

    def delta(d: dict[str, Any]) -> bytes:
        return named_event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})

    async for thought, said in cs.parts():
        if plan.tools is not None:
            continue  # buffered: parsed for tool calls at the end
        if thought:
            for frame in switch("thinking") if open_kind != "thinking" else []:
                yield frame
            yield delta({"type": "thinking_delta", "thinking": thought})
        if said:
            for frame in switch("text") if open_kind != "text" else []:
                yield frame
            yield delta({"type": "text_delta", "text": said})
    rec = cs.account()
    r = cs.result
    content, calls = split_tool_calls(plan, r)
    if plan.tools is not None:
        reasoning, _ = split_reasoning_of(plan, r)
        if reasoning:
            for frame in switch("thinking"):
                yield frame
            yield delta({"type": "thinking_delta", "thinking": reasoning})
        if content or not calls:
            for frame in switch("text"):
                yield frame
            if content:
                yield delta({"type": "text_delta", "text": content})
    elif open_kind != "text":
        for frame in switch("text"):  # an answer with no text still has its (empty) text block
            yield frame
    for frame in switch(None):
        yield frame
    for call in calls:
        block = shapes.tool_use_block(call)
        index += 1
        yield named_event(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}},
        )
        yield delta({"type": "input_json_delta", "partial_json": json.dumps(block["input"], ensure_ascii=False)})
        yield named_event("content_block_stop", {"type": "content_block_stop", "index": index})
    stop = None if calls else matched_stop(engine.tokenizer, r, stops)
    yield named_event(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": shapes.stop_reason(r.finish_reason, stop, bool(calls)), "stop_sequence": stop},
            # the whole usage, input included (as Anthropic's API sends it now): LangChain's
            # ChatAnthropic.stream() reads the input tokens from this event
            "usage": shapes.usage(rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens),
        },
    )
    yield named_event("message_stop", {"type": "message_stop"})
