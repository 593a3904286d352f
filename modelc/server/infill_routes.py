"""POST /infill: llama.cpp's code-infill endpoint (input_prefix, input_suffix, input_extra, prompt)
for models whose vocabulary has fill-in-the-middle tokens (modelc.server.fim); a clear 400 otherwise.

Answers in llama.cpp's /completion shape ({"content", "stop", "tokens_predicted", "stop_type", ...});
with stream=true one `data:` object per token, then the final one with "stop": true.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from quart import Blueprint

from modelc.server import llama_shapes, openapi_surfaces
from modelc.server.chat_run import ChatStream, run_chat, stream_chat
from modelc.server.context import char_budget, check_ids, prompt_limit, too_long
from modelc.server.fim import find_fim_tokens, infill_ids
from modelc.server.generation import ChoiceResult, Job
from modelc.server.handling import (
    check_model,
    engine_for,
    get_state,
    offload,
    precompile,
    read_json,
    record,
    require_generation,
    require_tokenizer,
)
from modelc.server.lora_field import with_lora
from modelc.server.schema import bad, get_bool, get_str, parse_constraint, parse_sampling, with_constraint
from modelc.server.served import ServedModel
from modelc.server.sse import sse_event

OPENAPI_PATHS = openapi_surfaces.INFILL
bp = Blueprint("infill", __name__)


@dataclass(frozen=True, slots=True)
class InfillPlan:
    model: str
    prompt_token_ids: tuple[int, ...]
    jobs: tuple[Job, ...]
    stream: bool
    stops: tuple[str, ...]
    prompt_text: str


def _extra(body: dict[str, Any]) -> list[tuple[str, str]]:
    v = body.get("input_extra")
    if v is None:
        return []
    if not isinstance(v, list):
        raise bad("input_extra", "must be a list of {'filename': ..., 'text': ...}")
    out = []
    for i, chunk in enumerate(v):
        if not isinstance(chunk, dict) or not isinstance(chunk.get("text", ""), str):
            raise bad(f"input_extra[{i}]", "must be {'filename': string, 'text': string}")
        name = chunk.get("filename", "tmp")
        if not isinstance(name, str):
            raise bad(f"input_extra[{i}].filename", "must be a string")
        out.append((name, chunk.get("text", "")))
    return out


def parse_infill(state: Any, engine: ServedModel, body: dict[str, Any]) -> InfillPlan:
    model = check_model(state, engine, body)
    require_generation(engine)
    tok = require_tokenizer(engine)
    limit = prompt_limit(engine, body)
    texts = [get_str(body, k, "") or "" for k in ("input_prefix", "input_suffix", "prompt")]
    num_chars = sum(len(t) for t in texts) + sum(len(a) + len(b) for a, b in _extra(body))
    if limit is not None and num_chars > char_budget(tok, limit):
        raise too_long("input_prefix", f"{num_chars} characters with the suffix and extra context", limit)
    fim = find_fim_tokens(tok)
    if fim is None:
        raise bad(
            "input_suffix",
            f"is not supported by model {engine.name!r}: its vocabulary has no fill-in-the-middle tokens",
        )
    ids = infill_ids(
        tok,
        fim,
        get_str(body, "input_prefix", "") or "",
        get_str(body, "input_suffix", "") or "",
        _extra(body),
        get_str(body, "prompt", "") or "",
    )
    ids = check_ids(list(ids), limit=limit, param="input_prefix")
    sb = llama_shapes.sampling_body(body)
    params = with_lora(parse_sampling(sb, state.config.defaults, vocab_size=tok.vocab_size), body, engine)
    constraint = parse_constraint(sb)
    precompile(engine, constraint)
    return InfillPlan(
        model=model,
        prompt_token_ids=tuple(ids),
        jobs=(Job(tuple(ids), with_constraint(params, constraint)),),
        stream=get_bool(body, "stream"),
        stops=params.stop,
        prompt_text=tok.decode(ids, skip_special=False),
    )


def final_object(plan: InfillPlan, engine: ServedModel, r: ChoiceResult, rec: Any, whole: bool) -> dict[str, Any]:
    """The whole answer (whole), or a stream's final frame (no content or tokens: the frames carried them)."""
    return llama_shapes.final_object(
        model=plan.model,
        prompt_ids=plan.prompt_token_ids,
        prompt_text=plan.prompt_text,
        stops=plan.stops,
        engine=engine,
        r=r,
        rec=rec,
        content=r.text if whole else "",
        tokens=list(r.token_ids) if whole else [],
    )


@bp.post("/infill")
async def infill() -> Any:
    state = get_state()
    body = await read_json()
    engine = await engine_for(state, body.get("model"))
    plan = await offload(parse_infill, state, engine, body)  # tokenizing runs off the loop
    if plan.stream:
        return await stream_chat(state, engine, plan, lambda cs: infill_events(cs, engine), llama_shapes.error_frames)
    r = await run_chat(state, engine, plan)
    return final_object(plan, engine, r, record(), True)


async def infill_events(cs: ChatStream, engine: ServedModel) -> AsyncGenerator[bytes, None]:
    plan = cs.plan
    async for text in cs.texts():
        r = cs.result
        yield sse_event(llama_shapes.token_frame(text, r.token_ids[-1], r, len(plan.prompt_token_ids)))
    rec = cs.account()
    yield sse_event(final_object(plan, engine, cs.result, rec, False))
