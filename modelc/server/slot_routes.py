"""GET /slots: llama-server's view of what each slot is doing, from the scheduler's own state (a DescribeSlots
message, answered between two steps: modelc.scheduler.slots).

A slot is one of an engine's max_num_seqs running places (engine i's are i * max_num_seqs ..); a running
sequence keeps its slot while it runs. Each slot is llama-server's metrics-only object (it never shows the
prompt or the text: llama-server shows them only with --slots-debug): id, n_ctx, speculative, is_processing,
n_past and, while one runs, id_task (modelc's sequence id), n_prompt_tokens, n_prompt_tokens_processed,
n_prompt_tokens_cache, params (the sampling settings modelc has, in llama.cpp's names, with the request's own
`lora` list by GET /lora-adapters' ids: [] when it gave none) and next_token. Sequences
still queued hold no slot. `?fail_on_no_slot=1`: a 503 when every slot is busy. A model that runs no
sequence scheduler (encoders, MLP/ONNX) has no slots: a 501 `not_supported_error`, as llama-server answers
with its slots off. llama-server's POST /slots/{id}?action=save|restore|erase is not served (docs/api.md).
"""

from __future__ import annotations

from typing import Any

from quart import Blueprint, request

from modelc.errors import NoSlotError, NotSupportedError
from modelc.scheduler.slots import SlotState
from modelc.server.handling import current_engine, get_state
from modelc.server.openapi import B, I, N, _obj, _op

bp = Blueprint("slots", __name__)
RANDOM_SEED = 4294967295  # llama.cpp's LLAMA_DEFAULT_SEED: the seed of a request that asked for a random one
SLOT = _obj(
    {
        "id": I,
        "n_ctx": I,
        "speculative": B,
        "is_processing": B,
        "n_past": I,
        "id_task": I,
        "n_prompt_tokens": I,
        "n_prompt_tokens_processed": I,
        "n_prompt_tokens_cache": I,
        "params": {"type": "object", "additionalProperties": {"anyOf": [N, B, {"type": "array"}]}},
        "next_token": {"type": "array", "items": _obj({"has_next_token": B, "n_remain": I, "n_decoded": I})},
    },
    ("id", "n_ctx", "speculative", "is_processing", "n_past"),
)
OPENAPI_PATHS = {
    "/slots": {
        "get": {
            **_op(
                "llama-server's slots: what each engine slot is doing",
                {"type": "array", "items": SLOT},
                errors=(401, 429, 501, 503),
            ),  # fmt: skip
            "parameters": [
                {
                    "name": "fail_on_no_slot",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "string"},
                    "description": "1: answer 503 when no slot is idle",
                }
            ],
        }
    }
}


def slot_params(s: SlotState, adapter_ids: dict[str, int]) -> dict[str, Any]:
    """The request's sampling settings under llama.cpp's names (those modelc has); adapter_ids: {name: id} of the
    adapters loaded now."""
    p = s.params
    assert p is not None
    lora = [{"id": adapter_ids[name], "scale": scale} for name, scale in p.lora or () if name in adapter_ids]
    return {
        "n_predict": p.max_tokens,
        "seed": RANDOM_SEED if p.seed is None else p.seed % 2**32,
        "temperature": p.temperature,
        "top_k": p.top_k,
        "top_p": p.top_p,
        "min_p": p.min_p,
        "typical_p": p.typical_p,
        "repeat_penalty": p.repetition_penalty,
        "presence_penalty": p.presence_penalty,
        "frequency_penalty": p.frequency_penalty,
        "max_tokens": p.max_tokens,
        "n_keep": p.n_keep,
        "ignore_eos": p.ignore_eos,
        "n_probs": p.top_logprobs,
        "min_tokens": p.min_tokens,
        "lora": lora,
    }


def slot_json(s: SlotState, adapter_ids: dict[str, int]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": s.slot_id,
        "n_ctx": s.n_ctx,
        "speculative": s.speculative,
        "is_processing": s.is_processing,
        "n_past": s.num_computed_tokens,
    }
    if s.seq_id is None or s.params is None:
        return out
    computed_prompt = min(s.num_computed_tokens, s.num_prompt_tokens)
    out.update(
        id_task=s.seq_id,
        n_prompt_tokens=s.num_prompt_tokens,
        n_prompt_tokens_processed=max(0, computed_prompt - s.num_cached_tokens),
        n_prompt_tokens_cache=s.num_cached_tokens,
        params=slot_params(s, adapter_ids),
        next_token=[
            {
                "has_next_token": True,
                "n_remain": max(0, s.params.max_tokens - s.num_output_tokens),
                "n_decoded": s.num_output_tokens,
            }
        ],
    )
    return out


@bp.get("/slots")
async def slots() -> Any:
    """llama-server's slots"""
    engine = current_engine(get_state())
    states = await engine.slots()
    if states is None:
        raise NotSupportedError(
            f"model {engine.name!r} ({engine.architecture}) runs no sequences in slots: /slots is for text generation"
        )
    if request.args.get("fail_on_no_slot") == "1" and all(s.is_processing for s in states):
        raise NoSlotError("no slot is available: every slot is processing")
    adapter_ids = {name: adapter_id for adapter_id, name, _, _ in engine.adapter_table()}
    return [slot_json(s, adapter_ids) for s in states]
