"""llama-server's LoRA lists by adapter id, `[{"id": 0, "scale": 0.5}, ...]`: the body of POST /lora-adapters and
the per-request `lora` field of /completion, /infill, /v1/completions and /v1/chat/completions. Pure: ids -> names
(ServedModel.adapter_table's stable ids), every bad value a 400.

A request's `lora` is its own adapter mix, llama-server's: the adapters listed run at their scales (alpha
multipliers, as the global scales), every loaded adapter not listed at 0 for this request, whatever the
global scales; an adapter the request names besides (the model `NAME:ADAPTER`) joins at its loaded alpha
unless the list gives it a scale; no `lora` (or null): the global scales, as before. It travels as
SamplingParams.lora, by name, to the engine, where sequences with different mixes share a batch.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from modelc.errors import InvalidRequestError
from modelc.request import SamplingParams, finite_number
from modelc.server.served import ServedModel


def parse_scales(body: Any, ids: dict[int, str], field: str | None = None) -> dict[str, float]:
    """[{id, scale}] -> {name: scale} of the adapters listed (a later entry for the same id wins, as in
    llama-server's map; a missing scale is 0, as there), given {id: name} of the adapters loaded; a 400 for
    anything else. `field`: the request field that holds the list (the 400's param), None for POST
    /lora-adapters' body."""
    where = "" if field is None else f" in '{field}'"
    if not isinstance(body, list):
        raise InvalidRequestError(f"'{field or 'lora'}' must be a JSON array of {{id, scale}} objects", param="lora")
    scales: dict[str, float] = {}
    for entry in body:
        if not isinstance(entry, dict):
            raise InvalidRequestError(f"each entry{where} must be an object {{id, scale}}", param=field or "id")
        i, scale = entry.get("id"), entry.get("scale", 0.0)
        if isinstance(i, bool) or not isinstance(i, int) or i not in ids:
            live = ", ".join(str(k) for k in sorted(ids)) or "none"
            raise InvalidRequestError(
                f"invalid adapter id {i!r}{where}: the loaded ids are {live}", param=field or "id"
            )
        if not finite_number(scale):
            raise InvalidRequestError(f"'scale' of adapter {i}{where} must be a finite number", param=field or "scale")
        scales[ids[i]] = float(scale)
    return scales


def with_lora(params: SamplingParams, body: dict[str, Any], engine: ServedModel) -> SamplingParams:
    """params with the request's `lora` mix (module docstring); unchanged without one."""
    raw = body.get("lora")
    if raw is None:
        return params
    ids = {adapter_id: name for adapter_id, name, _, _ in engine.adapter_table()}
    return replace(params, lora=tuple(parse_scales(raw, ids, "lora").items()))
