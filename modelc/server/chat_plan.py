"""One chat parse for every surface: a ChatRequest (what a chat body asks, in one form: llama.cpp turns
every body into one params object) -> plan_chat -> a ChatPlan (the prompt token ids, the jobs, the
offered tools, the reasoning syntax).

OpenAI chat completions parse their body into a ChatRequest (openai_chat.parse_chat); Anthropic Messages
and OpenAI Responses translate theirs into a chat-completions body first; Ollama /api/chat
(ollama_chat.py) and native /chat (native_routes.py) translate theirs straight into a ChatRequest. So
the chat template, tools, constraints, prompt bounds and reasoning split are this one pipeline. Pure:
no awaits (the routes run it off the event loop).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from modelc.errors import InvalidRequestError
from modelc.request import Constraint, SamplingParams
from modelc.server.generation import Job
from modelc.server.handling import precompile, require_tokenizer
from modelc.server.prompt import check_chat_size, encode_chat, model_reasoning_syntax, render_chat, tool_constraint
from modelc.server.schema import with_constraint
from modelc.server.served import ServedModel
from modelc.tokenizer.reasoning import starts_in_reasoning


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """A chat request of any surface, validated field by field by the surface that read it."""

    model: str  # the name the answer echoes
    messages: list[dict[str, Any]]  # schema.parse_messages' form: role, content text, tool calls
    params: SamplingParams  # without the constraint (plan_chat adds it)
    constraint: Constraint | None = None  # response_format, grammar, Ollama's format
    tools: list[dict[str, Any]] | None = None  # OpenAI function tools (schema.parse_tools)
    tool_choice: Any = "none"  # "none" | "auto" | "required" | a named function
    parallel_tool_calls: bool | None = None  # None: the default (allowed); True: a forced call is a list
    template_kwargs: dict[str, Any] | None = None  # to the chat template (enable_thinking, ...)
    limit: int | None = None  # prompt tokens beyond which it is a 400 (None: the engine truncates)
    reasoning: bool = True  # split the model's reasoning from its answer (when its template has one)
    n: int = 1
    stream: bool = False
    include_usage: bool = False


@dataclass(frozen=True, slots=True)
class ChatPlan:
    """A validated chat request."""

    model: str
    prompt_token_ids: tuple[int, ...]
    jobs: tuple[Job, ...]
    stream: bool
    include_usage: bool
    tools: tuple[dict[str, Any], ...] | None  # offered tools (None when tool_choice is none)
    parallel_tool_calls: bool
    logprobs: bool
    num_top: int
    reasoning: Any = None  # ReasoningSyntax whose thoughts go to reasoning_content (None: all is content)
    in_reasoning: bool = False  # the prompt already opened the reasoning
    forced_tool: bool = False  # tool_choice required/named: the output is a call envelope, never text


def make_jobs(prompt_ids: list[int], params: SamplingParams, n: int) -> list[Job]:
    """n choices of one prompt; with a seed, choice j uses seed + j (reproducible yet distinct)."""
    return [
        Job(tuple(prompt_ids), params if params.seed is None or j == 0 else replace(params, seed=params.seed + j))
        for j in range(n)
    ]


def plan_chat(engine: ServedModel, req: ChatRequest) -> ChatPlan:
    """The tools' constraint, the chat template, the prompt's bounds and token ids, the reasoning syntax."""
    tok = require_tokenizer(engine)
    offered = req.tools if req.tool_choice != "none" else None
    constraint = req.constraint
    tc = None
    if offered is not None:
        # An array of calls only when the client asked for parallel calls explicitly (OpenAI's default
        # `true` permits them; forcing a list on every `required` call would change the output shape).
        tc = tool_constraint(offered, req.tool_choice, parallel=req.parallel_tool_calls is True)
        if tc is not None and constraint is not None:
            raise InvalidRequestError(
                "tool_choice 'required' or a named function cannot be combined with response_format/grammar",
                param="tool_choice",
            )
        constraint = tc or constraint
    precompile(engine, constraint)
    check_chat_size(engine, req.messages, req.limit)
    text = render_chat(engine, req.messages, offered, req.template_kwargs)
    template = engine.chat_template
    ids = encode_chat(tok, text, template.bos_token if template is not None else None, req.limit)
    params = with_constraint(req.params, constraint)
    syntax = model_reasoning_syntax(engine) if req.reasoning else None
    return ChatPlan(
        model=req.model,
        prompt_token_ids=tuple(ids),
        jobs=tuple(make_jobs(ids, params, req.n)),
        stream=req.stream,
        include_usage=req.include_usage,
        tools=tuple(offered) if offered else None,
        parallel_tool_calls=req.parallel_tool_calls is not False,
        logprobs=params.logprobs,
        num_top=params.top_logprobs,
        reasoning=syntax,
        in_reasoning=starts_in_reasoning(syntax, text),
        forced_tool=tc is not None,
    )
