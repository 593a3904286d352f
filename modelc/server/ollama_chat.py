"""Ollama-shaped generation: POST /api/generate, /api/chat (NDJSON streaming by default, one object with
"stream": false), /api/embed and the older /api/embeddings.

An empty prompt / message list only loads the model (done_reason "load"), or unloads it when
keep_alive is 0 (done_reason "unload"), as Ollama does. Generation reuses the server's machinery
(ChoiceStreams, slots, records, metrics); the Ollama shapes are in ollama_shapes.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any

from quart import Blueprint, Response

from modelc.errors import InvalidRequestError, ModelcError
from modelc.request import Finished, SamplingParams
from modelc.server import ollama_shapes as shapes
from modelc.server import openapi_ollama
from modelc.server.bounds import bounded_int
from modelc.server.chat_plan import ChatRequest, plan_chat
from modelc.server.context import prompt_limit
from modelc.server.embedding import encode_vector, run_embeddings, truncate
from modelc.server.generation import ChoiceResult, Job, Timings
from modelc.server.handling import (
    get_state,
    json_off_loop,
    offload,
    precompile,
    read_json,
    require_generation,
    require_tokenizer,
)
from modelc.server.manager.models import parse_keep_alive
from modelc.server.ollama_routes import NDJSON, model_for, model_name, ndjson
from modelc.server.prompt import (
    encode_chat,
    encode_prompt,
    fim_prompt_ids,
    model_reasoning_syntax,
    parse_tool_calls,
    render_chat,
)
from modelc.server.run import RequestRun
from modelc.server.schema import parse_messages, parse_tools, with_constraint
from modelc.server.served import ServedModel
from modelc.server.state import ServerState
from modelc.tokenizer.reasoning import ReasoningSplitter, split_reasoning, starts_in_reasoning

bp = Blueprint("ollama_chat", __name__)
OPENAPI_PATHS = openapi_ollama.CHAT_PATHS


@dataclass(frozen=True, slots=True)
class OllamaPlan:
    """A validated /api/generate or /api/chat request."""

    model: str
    chat: bool
    prompt_token_ids: tuple[int, ...]
    params: SamplingParams
    stream: bool
    tools: tuple[dict[str, Any], ...] | None
    load_s: float
    reasoning: Any = None  # ReasoningSyntax: its thoughts go to message.thinking (chat) or thinking (generate)
    in_reasoning: bool = False  # the prompt already opened the reasoning


def _stream_flag(body: dict[str, Any]) -> bool:
    stream = body.get("stream", True)
    if not isinstance(stream, bool):
        raise InvalidRequestError("'stream' must be a boolean", param="stream")
    return stream


def _no_images(body: dict[str, Any]) -> None:
    msgs = body.get("messages") if isinstance(body.get("messages"), list) else []
    if body.get("images") or any(isinstance(m, dict) and m.get("images") for m in msgs):
        raise InvalidRequestError("images are not supported: modelc serves text models", param="images")


def _options(state: ServerState, engine: ServedModel, body: dict[str, Any]) -> tuple[SamplingParams, Any]:
    """`options` and `format`: the sampling parameters and the constraint, not yet joined."""
    require_generation(engine)
    params = shapes.sampling_params(
        body.get("options"), state.config.defaults, engine.tokenizer.vocab_size if engine.tokenizer else None
    )
    return params, shapes.format_constraint(body.get("format"))


def _params(state: ServerState, engine: ServedModel, body: dict[str, Any]) -> SamplingParams:
    params, constraint = _options(state, engine, body)
    precompile(engine, constraint)
    return with_constraint(params, constraint)


def ollama_limit(engine: ServedModel, body: dict[str, Any]) -> int | None:
    """Ollama truncates a prompt beyond the context unless told `truncate: false` (then a 400)."""
    return prompt_limit(engine, body, truncate_default=True)


def _generate_prompt(engine: ServedModel, body: dict[str, Any]) -> tuple[list[int], str | None]:
    """The prompt ids, and the rendered text when the chat template made it (then `think` applies and
    the answer's thoughts go to `thinking`, as on /api/chat); None for raw and fill-in-the-middle prompts."""
    prompt, system, suffix = body.get("prompt"), body.get("system"), body.get("suffix")
    think = _think_kwargs(body)
    for key, v in (("prompt", prompt), ("system", system), ("suffix", suffix)):
        if v is not None and not isinstance(v, str):
            raise InvalidRequestError(f"'{key}' must be a string", param=key)
    if body.get("template"):
        raise InvalidRequestError("'template' overrides are not supported; the model's chat template is used")
    tok = engine.tokenizer
    if suffix:
        return fim_prompt_ids(tok, prompt, suffix, ollama_limit(engine, body)), None
    if body.get("raw") or engine.chat_template is None:
        text = f"{system}\n\n{prompt}" if system else prompt
        return encode_prompt(tok, text, None, limit=ollama_limit(engine, body)), None
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    text = render_chat(engine, messages, None, think)
    return encode_chat(tok, text, engine.chat_template.bos_token, ollama_limit(engine, body)), text


def _think_kwargs(body: dict[str, Any]) -> dict[str, Any]:
    """Ollama's `think`: true/false switch the template's thinking (Qwen3/SmolLM3 enable_thinking, Granite
    thinking); "low"/"medium"/"high" set gpt-oss's reasoning_effort."""
    think = body.get("think")
    if think is None:
        return {}
    if isinstance(think, bool):
        return {"enable_thinking": think, "thinking": think}
    if think in ("low", "medium", "high"):
        return {"reasoning_effort": think}
    raise InvalidRequestError("'think' must be a boolean or one of low, medium, high", param="think")


def chat_request(state: ServerState, engine: ServedModel, body: dict[str, Any], name: str) -> ChatRequest:
    """An /api/chat body as the one chat request every surface makes (chat_plan.py): Ollama's `options`,
    `format`, `tools` (offered, never forced), `think` and its truncating context."""
    params, constraint = _options(state, engine, body)
    require_tokenizer(engine)
    messages = parse_messages(body)
    for m in messages:  # Ollama sends tool-call arguments as objects; templates expect JSON text
        for call in m.get("tool_calls") or []:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("arguments"), dict):
                fn["arguments"] = json.dumps(fn["arguments"])
    tools, choice = parse_tools({"tools": body["tools"]} if body.get("tools") else {})
    kwargs = _think_kwargs(body)
    return ChatRequest(
        name, messages, params, constraint, tools, choice, template_kwargs=kwargs, limit=ollama_limit(engine, body)
    )


def _prepare(
    state: ServerState, engine: ServedModel, body: dict[str, Any], chat: bool, name: str
) -> tuple[SamplingParams, list[int], tuple[dict[str, Any], ...] | None, Any, bool]:
    """Parameters, prompt ids, offered tools, the reasoning syntax and whether the prompt opens a thought:
    templates, tokenizer and grammar (run in a worker thread)."""
    if chat:
        plan = plan_chat(engine, chat_request(state, engine, body, name))
        return plan.jobs[0].params, list(plan.prompt_token_ids), plan.tools, plan.reasoning, plan.in_reasoning
    params = _params(state, engine, body)
    require_tokenizer(engine)
    ids, text = _generate_prompt(engine, body)
    syntax = model_reasoning_syntax(engine) if text is not None else None
    return params, ids, None, syntax, starts_in_reasoning(syntax, text or "")


async def _load_only(state: ServerState, name: str, body: dict[str, Any], chat: bool) -> dict[str, Any]:
    """Empty prompt: load the model, or unload it with keep_alive 0."""
    keep = parse_keep_alive(body.get("keep_alive"))
    if keep == 0 and state.models is not None and name:
        await state.models.unload(name)
        reason = "unload"
    else:
        await model_for(state, name, body.get("keep_alive"))
        reason = "load"
    out: dict[str, Any] = {"model": name, "created_at": shapes.iso_time(time.time())}
    out.update({"message": {"role": "assistant", "content": ""}} if chat else {"response": ""})
    return {**out, "done": True, "done_reason": reason}


@bp.post("/api/generate")
async def generate() -> Any:
    return await _run(chat=False)


@bp.post("/api/chat")
async def chat() -> Any:
    return await _run(chat=True)


async def _run(chat: bool) -> Any:
    state = get_state()
    body = await read_json()
    name = model_name(body)
    _no_images(body)
    stream = _stream_flag(body)
    empty = not body.get("messages") if chat else not body.get("prompt") and not body.get("suffix")
    if empty:
        return await _load_only(state, name, body, chat)
    started = time.monotonic()
    engine = await model_for(state, name, body.get("keep_alive"))
    load_s = time.monotonic() - started
    params, ids, tools, syntax, opened = await offload(_prepare, state, engine, body, chat, name)
    plan = OllamaPlan(name, chat, tuple(ids), params, stream, tools, load_s, syntax, opened)
    job = Job(plan.prompt_token_ids, plan.params)
    if not stream or tools is not None:
        run = RequestRun(state, engine, [job], start=time.monotonic())
        r = (await run.collect())[0]
        rec, timings = run.rec, run.timings
        thinking, answer = split_reasoning(r.text, plan.reasoning, in_reasoning=plan.in_reasoning)
        message = _message(plan, answer, thinking)
        if not stream:
            return {**_piece(plan, message), **_final(plan, r, timings, rec.start)}
        lines = [
            ndjson(_piece(plan, message)),
            ndjson({**_piece(plan, _message(plan, "")), **_final(plan, r, timings, rec.start)}),
        ]
        return Response(_lines(lines), content_type=NDJSON)
    run = RequestRun(state, engine, [job], start=time.monotonic())
    await run.start()
    return run.respond(_stream(plan, run), _error_frames, content_type=NDJSON)


async def _lines(lines: list[bytes]) -> AsyncIterator[bytes]:
    for line in lines:
        yield line


def _message(plan: OllamaPlan, text: str, thinking: str | None = None) -> Any:
    """A message (chat) or response text (generate; its thinking is a field of the line, _piece);
    with tools offered, tool calls are split out."""
    if not plan.chat:
        return (text, thinking) if thinking else text
    msg: dict[str, Any] = {"role": "assistant", "content": text}
    if thinking:
        msg["thinking"] = thinking
    if plan.tools and text:
        content, calls = parse_tool_calls(text, list(plan.tools))
        if calls:
            msg["content"] = content or ""
            msg["tool_calls"] = [
                {"function": {"name": c["function"]["name"], "arguments": _args(c["function"].get("arguments"))}}
                for c in calls
            ]
    return msg


def _args(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw
    return raw


def _piece(plan: OllamaPlan, message: Any, done: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"model": plan.model, "created_at": shapes.iso_time(time.time())}
    if plan.chat:
        out["message"] = message
    elif isinstance(message, tuple):  # generate: (response, thinking)
        out["response"], out["thinking"] = message
    else:
        out["response"] = message
    out["done"] = done
    return out


def _final(plan: OllamaPlan, r: ChoiceResult, timings: Timings, request_start: float) -> dict[str, Any]:
    now = time.monotonic()
    first = timings.first_token or now
    last = timings.last_token or now
    out: dict[str, Any] = {
        "done": True,
        "done_reason": r.finish_reason or "stop",
        "total_duration": shapes.ns(now - request_start),
        "load_duration": shapes.ns(plan.load_s),
        "prompt_eval_count": len(plan.prompt_token_ids),
        "prompt_eval_duration": shapes.ns(first - timings.start),
        "eval_count": len(r.token_ids),
        "eval_duration": shapes.ns(last - first),
    }
    if not plan.chat:
        out["context"] = [*plan.prompt_token_ids, *r.token_ids]
    return out


async def _stream(plan: OllamaPlan, run: RequestRun) -> AsyncGenerator[bytes, None]:
    splitter = ReasoningSplitter(plan.reasoning, in_reasoning=plan.in_reasoning)
    async for _, ev in run.events():
        if isinstance(ev, Finished):
            continue
        thinking, said = splitter.feed(ev.text)
        if said or thinking:
            yield ndjson(_piece(plan, _message(plan, said, thinking)))
    thinking, said = splitter.finish()
    if said or thinking:
        yield ndjson(_piece(plan, _message(plan, said, thinking)))
    run.account()
    yield ndjson({**_piece(plan, _message(plan, "")), **_final(plan, run.results[0], run.timings, run.rec.start)})


def _error_frames(e: ModelcError) -> tuple[bytes, ...]:
    return (ndjson({"error": e.message}),)


@bp.post("/api/embed")
async def embed() -> Any:
    state = get_state()
    body = await read_json()
    name = model_name(body)
    started = time.monotonic()
    engine = await model_for(state, name, body.get("keep_alive"))
    load_s = time.monotonic() - started
    raw = body.get("input")
    inputs = [raw] if isinstance(raw, str) else raw
    if not isinstance(inputs, list) or not inputs or not all(isinstance(x, str) for x in inputs):
        raise InvalidRequestError("'input' must be a string or a non-empty list of strings", param="input")
    dims = bounded_int(body, "dimensions", None)
    cut = body.get("truncate", True)  # Ollama: true cuts each input to the context, false answers an error
    if not isinstance(cut, bool):
        raise InvalidRequestError("'truncate' must be a boolean", param="truncate")
    vectors, num_tokens = await run_embeddings(state, engine, inputs, "input", truncate=cut)
    total_s = time.monotonic() - started
    return await json_off_loop(
        lambda: {
            "model": name,
            "embeddings": [encode_vector(v, "float") for v in truncate(vectors, dims)],
            "total_duration": shapes.ns(total_s),
            "load_duration": shapes.ns(load_s),
            "prompt_eval_count": num_tokens,
        }
    )


@bp.post("/api/embeddings")
async def embeddings_legacy() -> Any:
    """Ollama's older endpoint: {"model", "prompt"} -> {"embedding": [...]}."""
    state = get_state()
    body = await read_json()
    engine = await model_for(state, model_name(body), body.get("keep_alive"))
    prompt = body.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise InvalidRequestError("'prompt' must be a non-empty string", param="prompt")
    vectors, _ = await run_embeddings(state, engine, [prompt], "prompt", truncate=True)
    return {"embedding": encode_vector(vectors[0], "float")}
