"""POST /completion: llama.cpp's native completion endpoint (OpenAI's is /v1/completions), and
POST /apply-template: a chat-completions body -> {"prompt": the chat template's text}, the prompt that
/v1/chat/completions would run (llama-server's clients render with it, then send /completion).

`prompt`: a string, token ids, token ids mixed with strings (one prompt), or a list of those (one answer
each, as a JSON array, prompt-major with `n_cmpl` answers a prompt; a stream takes one prompt). A BOS is
added as llama-server adds it: where the prompt starts with text and the model adds one to its prompts.
Sampling: llama.cpp's names (n_predict, repeat_penalty, n_probs, logit_bias as [[id or text, bias or false]]),
and its defaults (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05) where neither the request nor the
operator (`modelc run --temperature ...`) sets one. Its knobs that modelc has no use for (cache_prompt: the
prefix cache is always on; id_slot; ...) are ignored, as llama-server ignores fields it does not know.

Answers: llama.cpp's shape ({"content", "stop", "tokens_predicted", "stop_type", "timings", ...}); with
stream=true one `data:` object per token ({"content", "tokens", "stop": false}) and the final one with
"stop": true. n_probs > 0 adds completion_probabilities: each generated token's id, text, bytes and
logprob with the n_probs most likely tokens at its step (the model's probabilities before sampling;
llama.cpp's post_sampling_probs is refused: modelc does not report the sampling chain's distribution).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from quart import Blueprint

from modelc.request import TokenEvent
from modelc.server import llama_shapes, openapi_surfaces
from modelc.server.bounds import bounded_int
from modelc.server.chat_plan import make_jobs
from modelc.server.context import check_ids, check_num_sequences, encode_bounded, prompt_limit
from modelc.server.generation import Job
from modelc.server.handling import (
    check_model,
    engine_for,
    get_state,
    json_off_loop,
    offload,
    precompile,
    read_json,
    require_generation,
    require_tokenizer,
)
from modelc.server.lora_field import with_lora
from modelc.server.openai_chat import chat_request
from modelc.server.prompt import render_chat
from modelc.server.run import RequestRun
from modelc.server.schema import (
    bad,
    check_token_ids,
    get_bool,
    parse_constraint,
    parse_sampling,
    with_constraint,
)
from modelc.server.served import ServedModel
from modelc.server.sse import sse_event
from modelc.server.state import ServerState

OPENAPI_PATHS = openapi_surfaces.COMPLETION
bp = Blueprint("llama_completion", __name__)
PROMPT_SHAPE = "must be a string, token ids (maybe mixed with strings), or a list of those"


@dataclass(frozen=True, slots=True)
class CompletionPlan:
    model: str
    prompt_ids: tuple[tuple[int, ...], ...]  # one per prompt
    prompt_texts: tuple[str, ...]  # each prompt as evaluated, special tokens included (llama.cpp's "prompt")
    jobs: tuple[Job, ...]  # n_cmpl per prompt, prompt-major
    n_cmpl: int
    stream: bool
    stops: tuple[str, ...]
    n_probs: int
    return_tokens: bool


def _is_id(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _one_prompt(p: Any) -> bool:
    """A string, or a non-empty list of token ids and strings with at least one id (llama.cpp's rule: a list of
    strings only is several prompts)."""
    if isinstance(p, str):
        return True
    return (
        isinstance(p, list)
        and bool(p)
        and all(_is_id(x) or isinstance(x, str) for x in p)
        and any(_is_id(x) for x in p)
    )


def prompt_pieces(v: Any, param: str = "prompt") -> list[list[int | str]]:
    """Each prompt of the request as its pieces (token ids and texts, in order); llama-server's
    tokenize_input_prompts forms (its /embedding's `content` takes them too)."""
    if v is None:
        raise bad(param, "is required")
    if _one_prompt(v):
        return [[v] if isinstance(v, str) else list(v)]
    if not isinstance(v, list) or not v:
        raise bad(param, PROMPT_SHAPE)
    out: list[list[int | str]] = []
    for p in v:
        if not _one_prompt(p):
            raise bad(param, PROMPT_SHAPE)
        out.append([p] if isinstance(p, str) else list(p))
    return out


def encode_pieces(tok: Any, pieces: list[int | str], limit: int | None) -> list[int]:
    """Token ids of one prompt: each text tokenized (special tokens parsed), the first with the model's BOS."""
    ids: list[int] = []
    for i, p in enumerate(pieces):
        if isinstance(p, str):
            ids += encode_bounded(tok, p, add_special=i == 0, limit=limit, param="prompt")
        else:
            ids.append(p)
    check_token_ids(ids, "prompt", tok.vocab_size)
    if not ids:
        raise bad("prompt", "is empty")
    return check_ids(ids, limit=limit, param="prompt")


def parse_completion(state: ServerState, engine: ServedModel, body: dict[str, Any]) -> CompletionPlan:
    model = check_model(state, engine, body)
    require_generation(engine)
    tok = require_tokenizer(engine)
    stream = get_bool(body, "stream")
    pieces = prompt_pieces(body.get("prompt"))
    if stream and len(pieces) > 1:
        raise bad("prompt", "takes one prompt with stream=true")
    if body.get("n_predict") == 0:
        raise bad("n_predict", "must be -1 (the server's limit) or >= 1: modelc does not evaluate a prompt alone")
    if get_bool(body, "post_sampling_probs"):
        raise bad("post_sampling_probs", "is not supported: n_probs reports the model's probabilities before sampling")
    n_cmpl = bounded_int(body, "n_cmpl", 1, "n") or 1
    if stream and n_cmpl > 1:
        raise bad("n_cmpl", "must be 1 with stream=true")
    check_num_sequences(engine, len(pieces) * n_cmpl)
    sb = llama_shapes.sampling_body(body)
    for name, value in llama_shapes.LLAMA_DEFAULTS.items():
        if name not in sb and getattr(state.config.defaults, name, None) is None:
            sb[name] = value
    n_probs = bounded_int(body, "n_probs", 0, "top_logprobs") or 0
    if n_probs:
        sb["logprobs"], sb["top_logprobs"] = True, n_probs
    if body.get("logit_bias") is not None:
        sb["logit_bias"] = llama_shapes.logit_bias(body["logit_bias"], lambda t: tok.encode(t, add_special=False))
    params = with_lora(parse_sampling(sb, state.config.defaults, vocab_size=tok.vocab_size), body, engine)
    constraint = parse_constraint(sb)
    precompile(engine, constraint)
    params = with_constraint(params, constraint)
    limit = prompt_limit(engine, body)
    ids = [encode_pieces(tok, p, limit) for p in pieces]
    return CompletionPlan(
        model=model,
        prompt_ids=tuple(tuple(p) for p in ids),
        prompt_texts=tuple(tok.decode(p, skip_special=False) for p in ids),
        jobs=tuple(job for p in ids for job in make_jobs(p, params, n_cmpl)),
        n_cmpl=n_cmpl,
        stream=stream,
        stops=params.stop,
        n_probs=n_probs,
        return_tokens=get_bool(body, "return_tokens"),
    )


def final(plan: CompletionPlan, engine: ServedModel, run: RequestRun, i: int, whole: bool) -> dict[str, Any]:
    """The answer for job i: the whole answer (whole) or a stream's final frame (no content, tokens or
    probabilities: the frames before it carried them)."""
    r = run.results[i]
    p = i // plan.n_cmpl
    out = llama_shapes.final_object(
        model=plan.model,
        prompt_ids=plan.prompt_ids[p],
        prompt_text=plan.prompt_texts[p],
        stops=plan.stops,
        engine=engine,
        r=r,
        rec=run.rec,
        content=r.text if whole else "",
        tokens=list(r.token_ids) if plan.return_tokens and whole else [],
        index=i,
    )
    if plan.n_probs and whole:
        out["completion_probabilities"] = llama_shapes.probabilities(engine, r, plan.n_probs)
    return out


@bp.post("/completion")
async def completion() -> Any:
    state = get_state()
    body = await read_json()
    engine = await engine_for(state, body.get("model"))
    plan = await offload(parse_completion, state, engine, body)  # tokenizing runs off the loop
    run = RequestRun(state, engine, plan.jobs, [len(p) for p in plan.prompt_ids])  # a prompt counts once
    if plan.stream:
        await run.start()
        return run.respond(token_frames(plan, engine, run), llama_shapes.error_frames)
    await run.collect()
    answers = [final(plan, engine, run, i, True) for i in range(len(plan.jobs))]
    return await json_off_loop(lambda: answers[0] if len(answers) == 1 else answers)  # llama-server: one, or an array


async def token_frames(plan: CompletionPlan, engine: ServedModel, run: RequestRun) -> AsyncGenerator[bytes, None]:
    """One frame per generated token (its text may be "": part of a multi-byte character), then the final one."""
    prompt_n = len(plan.prompt_ids[0])
    async for _, ev in run.events():
        if not isinstance(ev, TokenEvent):
            continue
        r = run.results[0]
        frame = llama_shapes.token_frame(ev.text, ev.token_id, r, prompt_n)
        if plan.n_probs:
            frame["completion_probabilities"] = llama_shapes.probabilities(
                engine, r, plan.n_probs, len(r.token_ids) - 1
            )
        yield sse_event(frame)
    run.account()
    yield sse_event(final(plan, engine, run, 0, False))


@bp.post("/apply-template")
async def apply_template() -> Any:
    state = get_state()
    body = await read_json()
    engine = await engine_for(state, body.get("model"))

    def render() -> str:
        req = chat_request(state, engine, body)  # validated as /v1/chat/completions validates it
        offered = req.tools if req.tool_choice != "none" else None
        return render_chat(engine, req.messages, offered, req.template_kwargs)

    return {"prompt": await offload(render)}
