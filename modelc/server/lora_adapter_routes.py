"""GET/POST /lora-adapters: llama-server's view of the LoRA adapters, on modelc's hot-swap.

An adapter is loaded by POST /lora/load (a file inside --adapters-dir); its id is given at its first load and
names it for as long as it stays loaded: unloading one renumbers no other, and a new one never takes an id
given before (engine/adapter_table.py). `scale` is its global scale, llama.cpp's: the alpha multiplier it
applies to requests naming no adapter (y = W x + scale * lora_alpha / r * B A x), 0 when it applies only to
requests naming it (`adapter`, or the model `NAME:ADAPTER`). POST sets the global scales by id, as llama-server
does: the adapters not listed go to 0; several at once add up. It travels as a ScaleAdapters message through
the scheduler to every engine, applied between steps. `path` is the adapter's path inside the adapters
directory, never more of the server's file system; a request here never names a path.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from quart import Blueprint, request

from modelc.server.body import OFFLOAD_BYTES, parse_body
from modelc.server.guard import control_route
from modelc.server.handling import current_engine, get_state, offload
from modelc.server.lora_field import parse_scales
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
        {"id": adapter_id, "path": shown_path(path, configured), "scale": scale}
        for adapter_id, _, path, scale in engine.adapter_table()
    ]


@bp.get("/lora-adapters")
async def list_adapters() -> Any:
    """llama-server's LoRA adapter list"""
    state = get_state()
    return adapter_list(current_engine(state), state.config.adapters_dir)


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
    table = engine.adapter_table()
    scales = dict.fromkeys((name for _, name, _, _ in table), 0.0)  # those not listed: 0
    scales.update(parse_scales(body, {adapter_id: name for adapter_id, name, _, _ in table}))
    await engine.scale_adapters(scales)
    return {"success": True}
