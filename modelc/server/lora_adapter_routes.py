"""GET/POST /lora-adapters: llama-server's view of the LoRA adapters, on modelc's hot-swap.

An adapter is loaded by POST /lora/load (a file inside --adapters-dir); its id is its position in load order
(unloading one renumbers the later ones). `scale` is its global scale, llama.cpp's: the alpha multiplier it
applies to requests naming no adapter (y = W x + scale * lora_alpha / r * B A x), 0 when it applies only to
requests naming it (`adapter`, or the model `NAME:ADAPTER`). POST sets the global scales by id, as llama-server
does: the adapters not listed go to 0; several at once add up. It travels as a ScaleAdapters message through
the scheduler to every engine, applied between steps. `path` is the adapter's path inside the adapters
directory, never more of the server's file system; a request here never names a path.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

from quart import Blueprint, request

from modelc.errors import InvalidRequestError
from modelc.server.body import OFFLOAD_BYTES, parse_body
from modelc.server.guard import control_route
from modelc.server.handling import current_engine, get_state, offload
from modelc.server.manager.lookup import adapters_dir
from modelc.server.openapi import B, I, N, S, _obj, _op
from modelc.server.served import ServedModel

bp = Blueprint("lora_adapters", __name__)
ADAPTER = _obj({"id": I, "path": S, "scale": N}, ("id", "path", "scale"))
OPENAPI_PATHS = {
    "/lora-adapters": {
        "get": _op("llama-server's LoRA adapter list: [{id, path, scale}]", {"type": "array", "items": ADAPTER}),
        "post": _op(
            "llama-server's: set the adapters' global scales by id (those not listed: 0)",
            _obj({"success": B}),
            {"type": "array", "items": _obj({"id": {**I, "minimum": 0}, "scale": N}, ("id",))},
        ),
    }
}


def shown_path(path: str, configured: str | None) -> str:
    """The adapter's path relative to the adapters directory (what the operator configured); its file name
    alone should it ever lie outside."""
    p, base = Path(path), adapters_dir(configured)
    try:
        return p.resolve().relative_to(base.resolve()).as_posix()
    except (ValueError, OSError):
        return p.name


def adapter_list(engine: ServedModel, configured: str | None) -> list[dict[str, Any]]:
    return [
        {"id": i, "path": shown_path(path, configured), "scale": scale}
        for i, (_, path, scale) in enumerate(engine.adapter_table())
    ]


@bp.get("/lora-adapters")
async def list_adapters() -> Any:
    """llama-server's LoRA adapter list"""
    state = get_state()
    return adapter_list(current_engine(state), state.config.adapters_dir)


def parse_scales(body: Any, names: list[str]) -> dict[str, float]:
    """[{id, scale}] -> {name: scale} for every loaded adapter (0 where not listed); a 400 for anything else."""
    if not isinstance(body, list):
        raise InvalidRequestError("the body must be a JSON array of {id, scale} objects", param="lora")
    scales = dict.fromkeys(names, 0.0)
    for entry in body:
        if not isinstance(entry, dict):
            raise InvalidRequestError("each entry must be an object {id, scale}", param="id")
        i, scale = entry.get("id"), entry.get("scale", 0.0)
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(names):
            raise InvalidRequestError(
                f"invalid adapter id {i!r}: {len(names)} adapters are loaded (ids 0..{len(names) - 1})", param="id"
            )
        if isinstance(scale, bool) or not isinstance(scale, int | float) or not math.isfinite(scale):
            raise InvalidRequestError("'scale' must be a finite number", param="scale")
        scales[names[i]] = float(scale)
    return scales


@bp.post("/lora-adapters")
@control_route
async def set_adapters() -> Any:
    """llama-server's: set the adapters' global scales by id"""
    state = get_state()
    engine = current_engine(state)
    raw = await request.get_data()
    body = (
        await offload(functools.partial(parse_body, raw, array=True))
        if len(raw) > OFFLOAD_BYTES
        else parse_body(raw, array=True)
    )
    names = [name for name, _, _ in engine.adapter_table()]
    await engine.scale_adapters(parse_scales(body, names))
    return {"success": True}
