"""POST /v1/completions: prompt(s) (text or token ids) -> engine -> text_completion or SSE chunks.

Supports n, best_of (ranked by cumulative logprob), echo, suffix (fill-in-the-middle models only),
legacy logprobs {tokens, token_logprobs, top_logprobs, text_offset}.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, replace
from typing import Any

from quart import Blueprint

from modelc.errors import InvalidRequestError
from modelc.request import Finished
from modelc.server import openai_format as fmt
from modelc.server.chat_plan import make_jobs
from modelc.server.context import check_num_sequences, prompt_limit
from modelc.server.generation import ChoiceResult, Job
from modelc.server.handling import (
    check_model,
    engine_for,
    get_state,
    offload,
    precompile,
    read_json,
    require_generation,
    require_tokenizer,
)
from modelc.server.lora_field import with_lora
from modelc.server.prompt import encode_prompt, fim_prompt_ids
from modelc.server.run import RequestRun
from modelc.server.schema import (
    check_openai_max_tokens,
    get_bool,
    get_str,
    parse_constraint,
    parse_n,
    parse_prompts,
    parse_sampling,
    parse_stream_options,
    with_constraint,
)
from modelc.server.served import ServedModel
from modelc.server.sse import DONE, sse_event
from modelc.server.state import ServerState
from modelc.server.streaming import openai_error_frames

bp = Blueprint("openai_completions", __name__)


@dataclass(frozen=True, slots=True)
class CompletionPlan:
    model: str
    prompt_ids: tuple[tuple[int, ...], ...]  # one per prompt
    prompt_texts: tuple[str, ...]  # for echo
    jobs: tuple[Job, ...]  # best_of per prompt, prompt-major
    n: int
    best_of: int
    stream: bool
    include_usage: bool
    echo: bool
    logprobs: bool  # what the client asked (best_of > n forces them internally)
    num_top: int


def parse_completion(state: ServerState, engine: ServedModel, body: dict[str, Any]) -> CompletionPlan:
    model = check_model(state, engine, body)
    require_generation(engine)
    stream = get_bool(body, "stream")
    include_usage = parse_stream_options(body, stream)
    n, best_of = parse_n(body, stream=stream, allow_best_of=True)
    check_openai_max_tokens(body)
    tok = engine.tokenizer
    vocab = tok.vocab_size if tok is not None else None
    params = with_lora(parse_sampling(body, state.config.defaults, vocab_size=vocab), body, engine)
    echo = get_bool(body, "echo")
    if echo and params.logprobs:
        raise InvalidRequestError(
            "echo with logprobs is not supported: modelc does not compute prompt logprobs", param="echo"
        )
    prompts = parse_prompts(body)
    if any(isinstance(p, str) for p in prompts) or echo:
        require_tokenizer(engine)  # text in or out needs the tokenizer: a 400, never an AttributeError
    check_num_sequences(engine, len(prompts) * best_of)
    limit = prompt_limit(engine, body)
    suffix = get_str(body, "suffix")
    if suffix:
        if any(not isinstance(p, str) for p in prompts):
            raise InvalidRequestError("'suffix' needs text prompts", param="suffix")
        ids = [fim_prompt_ids(tok, p, suffix, limit) for p in prompts]
    else:
        ids = [encode_prompt(tok, p, vocab, limit=limit) for p in prompts]
    texts = [p if isinstance(p, str) else tok.decode(p) for p in prompts] if echo else ["" for _ in prompts]
    constraint = parse_constraint(body)
    precompile(engine, constraint)
    params = with_constraint(params, constraint)
    job_params = replace(params, logprobs=True) if best_of > n else params
    jobs = [job for p in ids for job in make_jobs(p, job_params, best_of)]
    return CompletionPlan(
        model=model,
        prompt_ids=tuple(tuple(p) for p in ids),
        prompt_texts=tuple(texts),
        jobs=tuple(jobs),
        n=n,
        best_of=best_of,
        stream=stream,
        include_usage=include_usage,
        echo=echo,
        logprobs=params.logprobs,
        num_top=params.top_logprobs,
    )


def pick_best(plan: CompletionPlan, results: list[ChoiceResult]) -> list[tuple[int, ChoiceResult]]:
    """(prompt index, result) for the returned choices: the n best of each prompt's best_of by
    cumulative logprob (ties keep generation order)."""
    out = []
    for p in range(len(plan.prompt_ids)):
        group = results[p * plan.best_of : (p + 1) * plan.best_of]
        if plan.best_of > plan.n:
            group = sorted(group, key=lambda r: -r.cumulative_logprob)[: plan.n]
        out.extend((p, r) for r in group)
    return out


@bp.post("/v1/completions")
@bp.post("/completions")
async def completions() -> Any:
    state = get_state()
    body = await read_json()
    engine = await engine_for(state, body.get("model"))
    plan = await offload(parse_completion, state, engine, body)  # tokenizing runs off the loop
    run = RequestRun(state, engine, plan.jobs, [len(p) for p in plan.prompt_ids])
    if plan.stream:
        await run.start()
        return run.respond(completion_sse(engine, plan, run), openai_error_frames)
    results = await run.collect()
    rec = run.rec
    tok = engine.tokenizer
    choices = []
    for k, (p, r) in enumerate(pick_best(plan, results)):
        prefix = plan.prompt_texts[p]
        lp = fmt.completion_logprobs(tok, r, num_top=plan.num_top) if plan.logprobs else None
        choices.append({"index": k, "text": prefix + r.text, "logprobs": lp, "finish_reason": r.finish_reason})
    return fmt.text_completion(
        rec.request_id,
        int(time.time()),
        plan.model,
        choices,
        fmt.usage(rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens),
    )


async def completion_sse(engine: ServedModel, plan: CompletionPlan, run: RequestRun) -> AsyncGenerator[bytes, None]:
    tok = engine.tokenizer
    created = int(time.time())
    rec, results = run.rec, run.results

    def chunk(i: int, text: str, finish: str | None = None, logprobs: Any = None) -> bytes:
        choice = {"index": i, "text": text, "logprobs": logprobs, "finish_reason": finish}
        return sse_event(fmt.text_completion(rec.request_id, created, plan.model, [choice], None, plan.include_usage))

    if plan.echo:
        for i in range(len(results)):
            yield chunk(i, plan.prompt_texts[i // plan.n])
    async for i, ev in run.events():
        r = results[i]
        if isinstance(ev, Finished):
            yield chunk(i, "", r.finish_reason)
            continue
        if ev.text or plan.logprobs:
            k = len(r.token_ids) - 1
            lp = fmt.completion_logprobs(tok, r, k, k + 1, plan.num_top) if plan.logprobs else None
            yield chunk(i, ev.text, None, lp)
    run.account()
    if plan.include_usage:
        usage = fmt.usage(rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens)
        yield sse_event(fmt.text_completion(rec.request_id, created, plan.model, [], usage))
    yield DONE
