"""POST /v1/responses (+ GET/DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items; the same
paths without /v1): the OpenAI Responses API on the chat pipeline.

The body (plus the stored conversation of previous_response_id) becomes a chat-completions body
(responses_shapes.chat_body) run through openai_chat.parse_chat. Streams are typed events
(`event: response.output_text.delta` ...) with a sequence_number; with tools offered the text is
buffered and split into a message item and function_call items at the end. store (default true)
keeps the conversation in a bounded in-memory LRU (responses_store.ResponseStore).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from quart import Blueprint, current_app, request

from modelc.errors import ModelcError
from modelc.server import openai_format, openapi_surfaces, responses_store
from modelc.server import responses_shapes as shapes
from modelc.server.bounds import query_int
from modelc.server.chat_run import ChatStream, named_event, run_chat, stream_chat
from modelc.server.generation import ChoiceResult
from modelc.server.handling import engine_for, get_state, offload, read_json, record
from modelc.server.openai_chat import parse_chat, split_reasoning_of, split_tool_calls
from modelc.server.schema import bad, get_bool

OPENAPI_PATHS = openapi_surfaces.RESPONSES
bp = Blueprint("responses", __name__)
STORE_KEY = "modelc.responses"


@bp.record_once
def _make_store(setup: Any) -> None:
    setup.app.extensions[STORE_KEY] = responses_store.ResponseStore()


def store() -> responses_store.ResponseStore:
    return current_app.extensions[STORE_KEY]


class Turn:
    """One request's pieces: the original body, its id, the conversation to store, the plan."""

    def __init__(self, body: dict[str, Any], conversation: list[dict[str, Any]], plan: Any, tokenizer: Any) -> None:
        self.body = body
        self.tokenizer = tokenizer
        self.response_id = shapes.new_id("resp")
        self.conversation = conversation
        self.plan = plan
        self.keep = get_bool(body, "store", True)
        self.input_items = tuple(shapes.input_items(body["input"]))
        self.rec = record()  # streams run outside the request context: hold what they need
        self.store = store()

    def output(self, r: ChoiceResult) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The output items and the assistant message to store."""
        content, calls = split_tool_calls(self.plan, r)
        reasoning, _ = split_reasoning_of(self.plan, r)
        items: list[dict[str, Any]] = [shapes.reasoning_item(shapes.new_id("rs"), reasoning)] if reasoning else []
        if content is not None or not (calls or self.plan.forced_tool):  # a cut forced call has no message
            items.append(shapes.message_item(shapes.new_id("msg"), content or "", logprobs=self.logprobs(r)))
        items += [shapes.function_call_item(c) for c in calls]
        return items, shapes.assistant_message(content, calls)

    def logprobs(self, r: ChoiceResult) -> list[dict[str, Any]] | None:
        """The output_text logprobs (include message.output_text.logprobs, or top_logprobs > 0): every
        generated token's, as chat completions gives them."""
        if not self.plan.logprobs:
            return None
        return openai_format.chat_logprob_entries(self.tokenizer, r, num_top=self.plan.num_top)

    def finish(self, r: ChoiceResult, items: list[dict[str, Any]], assistant: dict[str, Any]) -> dict[str, Any]:
        rec = self.rec
        status = "incomplete" if r.finish_reason == "length" else "completed"
        resp = shapes.response_object(
            self.response_id,
            self.body,
            self.plan.model,
            status=status,
            output=items,
            usage_obj=shapes.usage(rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens),
            finish_reason=r.finish_reason,
        )
        if self.keep:
            stored = responses_store.Stored(tuple([*self.conversation, assistant]), resp, self.input_items)
            self.store.put(self.response_id, stored)
        return resp


@bp.post("/v1/responses")
@bp.post("/responses")
async def create_response() -> Any:
    state = get_state()
    body = await read_json()
    history: list[dict[str, Any]] = []
    prev = body.get("previous_response_id")
    if prev is not None:
        if not isinstance(prev, str):
            raise bad("previous_response_id", "must be a string")
        history = list(store().get(prev).messages)
    chat, conversation = shapes.chat_body(body, history)
    engine = await engine_for(state, chat.get("model"))
    turn = Turn(body, conversation, await offload(parse_chat, state, engine, chat), engine.tokenizer)  # off the loop
    if turn.plan.stream:
        return await stream_chat(state, engine, turn.plan, lambda cs: response_events(cs, turn), error_frames)
    r = await run_chat(state, engine, turn.plan)
    items, assistant = turn.output(r)
    return turn.finish(r, items, assistant)


@bp.get("/v1/responses/<response_id>")
@bp.get("/responses/<response_id>")
async def get_response(response_id: str) -> Any:
    return store().get(response_id, param="response_id").response


@bp.get("/v1/responses/<response_id>/input_items")
@bp.get("/responses/<response_id>/input_items")
async def list_input_items(response_id: str) -> Any:
    """The input items of a stored response, a page of OpenAI's list shape (order desc by default)."""
    args = request.args
    limit = query_int(args, "limit", 20, "input_items_limit")
    order = args.get("order", "desc")
    if order not in ("asc", "desc"):
        raise bad("order", f"must be asc or desc, got {order[:40]!r}")
    items = list(store().get(response_id, param="response_id").input_items)
    if order == "desc":
        items.reverse()
    ids = [item["id"] for item in items]
    for name in ("after", "before"):
        cursor = args.get(name)
        if cursor is None:
            continue
        if cursor not in ids:
            raise bad(name, "is not the id of an input item of this response")
        at = ids.index(cursor)
        items, ids = (items[at + 1 :], ids[at + 1 :]) if name == "after" else (items[:at], ids[:at])
    page = items[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(items) > limit,
    }


@bp.delete("/v1/responses/<response_id>")
@bp.delete("/responses/<response_id>")
async def delete_response(response_id: str) -> Any:
    store().delete(response_id)
    return {"id": response_id, "object": "response", "deleted": True}


def error_frames(e: ModelcError) -> tuple[bytes, ...]:
    return (
        named_event("error", {"type": "error", "code": e.code or e.error_type, "message": e.message, "param": e.param}),
    )


async def response_events(cs: ChatStream, turn: Turn) -> AsyncGenerator[bytes, None]:
    """created, in_progress; a reasoning item (the model's thoughts) and the message item streamed
    token by token (or, with tools, buffered items at the end); then completed (or incomplete)
    with the whole response."""
    seq = 0

    def event(kind: str, **fields: Any) -> bytes:
        nonlocal seq
        seq += 1
        return named_event(kind, {"type": kind, "sequence_number": seq - 1, **fields})

    plan = turn.plan
    pending = shapes.response_object(
        turn.response_id, turn.body, plan.model, status="in_progress", output=[], usage_obj=None
    )
    yield event("response.created", response=pending)
    yield event("response.in_progress", response=pending)
    ids = {"reasoning": shapes.new_id("rs"), "message": shapes.new_id("msg")}
    texts = {"reasoning": "", "message": ""}
    index = -1
    open_kind: str | None = None

    def where(kind: str) -> dict[str, Any]:
        return {"item_id": ids[kind], "output_index": index, "content_index": 0}

    def close() -> list[bytes]:
        if open_kind == "reasoning":
            text = texts["reasoning"]
            return [
                event("response.reasoning_text.done", **where("reasoning"), text=text),
                event(
                    "response.output_item.done", output_index=index, item=shapes.reasoning_item(ids["reasoning"], text)
                ),
            ]
        if open_kind == "message":
            text = texts["message"]
            lps = turn.logprobs(cs.result)  # the tokens so far (all of them once the answer is done)
            return [
                event("response.output_text.done", **where("message"), text=text, logprobs=lps or []),
                event("response.content_part.done", **where("message"), part=shapes.output_text(text, lps)),
                event(
                    "response.output_item.done",
                    output_index=index,
                    item=shapes.message_item(ids["message"], text, logprobs=lps),
                ),
            ]
        return []

    def switch(kind: str) -> list[bytes]:
        nonlocal index, open_kind
        out = close()
        index += 1
        open_kind = kind
        if kind == "reasoning":
            item = {**shapes.reasoning_item(ids["reasoning"], ""), "status": "in_progress", "content": []}
            return [*out, event("response.output_item.added", output_index=index, item=item)]
        return [
            *out,
            event(
                "response.output_item.added",
                output_index=index,
                item=shapes.message_item(ids["message"], "", "in_progress"),
            ),
            event("response.content_part.added", **where("message"), part=shapes.output_text("")),
        ]

    def add(kind: str, text: str) -> list[bytes]:
        out = switch(kind) if open_kind != kind else []
        texts[kind] += text
        name = "response.reasoning_text.delta" if kind == "reasoning" else "response.output_text.delta"
        extra = {} if kind == "reasoning" else {"logprobs": []}
        return [*out, event(name, **where(kind), delta=text, **extra)]

    async for thought, said in cs.parts():
        if plan.tools is not None:
            continue  # buffered: parsed for tool calls at the end
        for kind, text in (("reasoning", thought), ("message", said)):
            if text:
                for frame in add(kind, text):
                    yield frame
    cs.account()
    r = cs.result
    items, assistant = turn.output(r)
    if plan.tools is None and open_kind != "message":
        for frame in switch("message"):  # an answer with no text still has its message item
            yield frame
    for item in items:
        kind = item["type"]
        if kind == "reasoning":
            item["id"] = ids["reasoning"]
        if kind == "message":
            item["id"] = ids["message"]
        if plan.tools is None:
            continue  # streamed above
        if kind in ("reasoning", "message"):
            text = item["content"][0]["text"]
            for frame in add(kind, text) if text else switch(kind):
                yield frame
            continue
        for frame in close():
            yield frame
        open_kind = None
        index += 1
        yield event(
            "response.output_item.added", output_index=index, item={**item, "status": "in_progress", "arguments": ""}
        )
        yield event(
            "response.function_call_arguments.delta", item_id=item["id"], output_index=index, delta=item["arguments"]
        )
        yield event(
            "response.function_call_arguments.done",
            item_id=item["id"],
            output_index=index,
            name=item["name"],
            arguments=item["arguments"],
        )
        yield event("response.output_item.done", output_index=index, item=item)
    for frame in close():
        yield frame
    final = turn.finish(r, items, assistant)
    yield event("response.completed" if final["status"] == "completed" else "response.incomplete", response=final)
