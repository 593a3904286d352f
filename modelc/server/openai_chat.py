"""POST /v1/chat/completions: messages -> chat template (+ tools) -> engine -> chat.completion or SSE chunks.

With tools offered (tool_choice != none) the text is buffered and parsed for tool calls at the end
(message.tool_calls, finish_reason "tool_calls"); otherwise content streams token by token.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from typing import Any

from quart import Blueprint

from modelc.errors import InvalidRequestError
from modelc.request import Finished
from modelc.server import openai_format as fmt
from modelc.server.chat_plan import ChatPlan, ChatRequest, plan_chat
from modelc.server.context import prompt_limit
from modelc.server.generation import ChoiceResult
from modelc.server.handling import (
    check_model,
    engine_for,
    get_state,
    offload,
    read_json,
    require_generation,
    require_tokenizer,
)
from modelc.server.lora_field import with_lora
from modelc.server.prompt import parse_tool_calls
from modelc.server.run import RequestRun
from modelc.server.schema import (
    check_openai_max_tokens,
    get_bool,
    parse_constraint,
    parse_messages,
    parse_n,
    parse_sampling,
    parse_stream_options,
    parse_tools,
)
from modelc.server.served import ServedModel
from modelc.server.sse import DONE, sse_event
from modelc.server.state import ServerState
from modelc.server.streaming import openai_error_frames
from modelc.tokenizer.reasoning import ReasoningSplitter, check_reasoning_format, split_reasoning

bp = Blueprint("openai_chat", __name__)


def parse_chat(state: ServerState, engine: ServedModel, body: dict[str, Any]) -> ChatPlan:
    """A chat-completions body (also what Anthropic Messages and Responses translate theirs into) -> its plan."""
    check_openai_max_tokens(body)  # the two translate theirs from fields with their own minimum (1, 16)
    return plan_chat(engine, chat_request(state, engine, body))


def chat_request(state: ServerState, engine: ServedModel, body: dict[str, Any]) -> ChatRequest:
    model = check_model(state, engine, body)
    require_generation(engine)
    stream = get_bool(body, "stream")
    include_usage = parse_stream_options(body, stream)
    n, _ = parse_n(body, stream=stream, allow_best_of=False)
    tok = require_tokenizer(engine)  # a chat is text: a model without a tokenizer cannot take one (400)
    params = with_lora(parse_sampling(body, state.config.defaults, vocab_size=tok.vocab_size), body, engine)
    messages = parse_messages(body)
    tools, tool_choice = parse_tools(body)
    constraint = parse_constraint(body)
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise InvalidRequestError("'chat_template_kwargs' must be an object", param="chat_template_kwargs")
    parallel = body.get("parallel_tool_calls")
    return ChatRequest(
        model=model,
        messages=messages,
        params=params,
        constraint=constraint,
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=None if parallel is None else get_bool(body, "parallel_tool_calls"),
        template_kwargs=kwargs,
        limit=prompt_limit(engine, body),
        reasoning=check_reasoning_format(body.get("reasoning_format")) != "none",
        n=n,
        stream=stream,
        include_usage=include_usage,
    )


def split_reasoning_of(plan: ChatPlan, r: ChoiceResult) -> tuple[str | None, str]:
    """(reasoning_content or None, the rest) of a choice's text."""
    if plan.reasoning is None:
        return None, r.text
    return split_reasoning(r.text, plan.reasoning, in_reasoning=plan.in_reasoning)


def split_tool_calls(plan: ChatPlan, r: ChoiceResult) -> tuple[str | None, list[dict[str, Any]]]:
    """(content, tool calls) of a choice. A forced call (tool_choice required or named) that max_tokens
    cut before it was whole has neither: its text is modelc's call envelope, not an answer; the finish
    reason ("length") says the output is incomplete."""
    _, text = split_reasoning_of(plan, r)
    if plan.tools is None:
        return text, []
    content, calls = parse_tool_calls(text, list(plan.tools))
    if calls and not plan.parallel_tool_calls:
        calls = calls[:1]
    if not calls and plan.forced_tool:
        return None, []
    return (content or None) if calls else text, calls


def chat_choice(tok: Any, plan: ChatPlan, r: ChoiceResult) -> dict[str, Any]:
    content, calls = split_tool_calls(plan, r)
    message: dict[str, Any] = {"role": "assistant", "content": content}
    reasoning, _ = split_reasoning_of(plan, r)
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    finish = r.finish_reason
    if calls:
        message["tool_calls"] = calls
        finish = "tool_calls"
    logprobs = {"content": fmt.chat_logprob_entries(tok, r, num_top=plan.num_top)} if plan.logprobs else None
    return {"index": r.index, "message": message, "logprobs": logprobs, "finish_reason": finish}


@bp.post("/v1/chat/completions")
@bp.post("/chat/completions")  # the OpenAI paths without /v1, as llama.cpp's server and vLLM
async def chat_completions() -> Any:
    state = get_state()
    body = await read_json()
    engine = await engine_for(state, body.get("model"))
    plan = await offload(parse_chat, state, engine, body)  # templates, tokenizer, grammar: off the loop
    run = RequestRun(state, engine, plan.jobs, [len(plan.prompt_token_ids)])
    if plan.stream:
        await run.start()
        return run.respond(chat_sse(engine, plan, run), openai_error_frames)
    results = await run.collect()
    rec = run.rec
    choices = [chat_choice(engine.tokenizer, plan, r) for r in results]
    return fmt.chat_completion(
        rec.request_id,
        int(time.time()),
        plan.model,
        choices,
        fmt.usage(rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens),
    )


async def chat_sse(engine: ServedModel, plan: ChatPlan, run: RequestRun) -> AsyncGenerator[bytes, None]:
    tok = engine.tokenizer
    created = int(time.time())
    rec, results = run.rec, run.results

    def chunk(i: int, delta: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> bytes:
        return sse_event(
            fmt.chat_chunk(
                rec.request_id, created, plan.model, [fmt.chunk_choice(i, delta, finish, logprobs)], plan.include_usage
            )
        )

    splitters = [ReasoningSplitter(plan.reasoning, in_reasoning=plan.in_reasoning) for _ in results]

    def deltas(i: int, text: str, lp: Any, *, last: bool = False) -> list[bytes]:
        """Content chunks of streamed text, its reasoning apart (reasoning_content deltas)."""
        if last:
            thought, said = splitters[i].finish()
        else:
            thought, said = splitters[i].feed(text)
        out = []
        if thought:
            out.append(chunk(i, {"reasoning_content": thought}, None, None if said else lp))
        if said or (lp is not None and not thought):  # a held-back token still reports its logprobs
            out.append(chunk(i, {"content": said}, None, lp))
        return out

    for i in range(len(results)):
        yield chunk(i, {"role": "assistant", "content": ""})
    async for i, ev in run.events():
        r = results[i]
        if isinstance(ev, Finished):
            if plan.tools is None and plan.reasoning is not None:
                for piece in deltas(i, "", None, last=True):
                    yield piece
            for piece in final_chunks(tok, plan, r, chunk):
                yield piece
            continue
        if plan.tools is None and (ev.text or plan.logprobs):
            k = len(r.token_ids) - 1
            lp = {"content": fmt.chat_logprob_entries(tok, r, k, k + 1, plan.num_top)} if plan.logprobs else None
            if plan.reasoning is None:
                yield chunk(i, {"content": ev.text}, None, lp)
            else:
                for piece in deltas(i, ev.text, lp):
                    yield piece
    run.account()
    if plan.include_usage:
        usage = fmt.usage(rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens)
        yield sse_event(fmt.chat_chunk(rec.request_id, created, plan.model, [], True, usage))
    yield DONE


def final_chunks(tok: Any, plan: ChatPlan, r: ChoiceResult, chunk: Any) -> list[bytes]:
    """The end of one choice: buffered content or tool calls (tools offered), then finish_reason."""
    if plan.tools is None:
        return [chunk(r.index, {}, r.finish_reason)]
    content, calls = split_tool_calls(plan, r)
    reasoning, text = split_reasoning_of(plan, r)
    lp = {"content": fmt.chat_logprob_entries(tok, r, num_top=plan.num_top)} if plan.logprobs else None
    out = [chunk(r.index, {"reasoning_content": reasoning})] if reasoning is not None else []
    if calls:
        if content:
            out.append(chunk(r.index, {"content": content}, None, lp))
            lp = None
        out.append(chunk(r.index, {"tool_calls": fmt.tool_call_deltas(calls)}, None, lp))
        out.append(chunk(r.index, {}, "tool_calls"))
        return out
    if content is None:  # a forced call cut short: no content to send
        return [*out, chunk(r.index, {}, r.finish_reason, lp)]
    return [*out, chunk(r.index, {"content": text}, None, lp), chunk(r.index, {}, r.finish_reason)]
