"""Hand-written OpenAPI entries of the Ollama routes that take a model's input (/api/generate,
/api/chat, /api/embed, /api/embeddings, /api/show): their `options` bounds come from the one bounds
table (server/bounds.py) through OPTION_FIELDS, as the parsing does (ollama_shapes.sampling_params).
The other /api/* entries are still generated from their views' docstrings (server/openapi.other_paths).
"""

from __future__ import annotations

from typing import Any

from modelc.server.bounds import schema_of
from modelc.server.ollama_shapes import OPTION_FIELDS
from modelc.server.openapi import GEN_ERRORS, MODEL_NAME, STOP, B, I, N, S, _obj, _op

BY_NAME = {
    "model": {**MODEL_NAME, "minLength": 1},
    "name": {**MODEL_NAME, "minLength": 1, "description": "older name of 'model'"},
}
NAMED = {"anyOf": [{"required": ["model"]}, {"required": ["name"]}]}
OPTIONS = {
    **_obj(
        {
            option: STOP if field == "stop" else schema_of(option if option == "num_predict" else field)
            for option, field in OPTION_FIELDS.items()
        }
    ),
    "description": "sampling options; others (mirostat, num_gpu, ...) are accepted and ignored",
}
KEEP_ALIVE = {
    "oneOf": [
        N,
        {**S, "pattern": r"^-?[0-9]+(\.[0-9]+)?((ms|s|m|h)([0-9]+(\.[0-9]+)?(ms|s|m|h))*)?$"},
    ],
    "description": "how long the model stays loaded: seconds or a duration ('5m', '1h30m'); negative = always",
}
NO_IMAGES = {"type": "array", "maxItems": 0, "description": "images are not supported (text models)"}
FORMAT = {"oneOf": [{"enum": ["", "json"]}, {"type": "object"}], "description": '"json" or a JSON schema'}
THINK = {"oneOf": [B, {"enum": ["low", "medium", "high"]}]}
GEN_COMMON = {
    **BY_NAME,
    "stream": {**B, "description": "NDJSON lines (the default) or one JSON object"},
    "format": FORMAT,
    "options": OPTIONS,
    "keep_alive": KEEP_ALIVE,
    "think": THINK,
    "images": NO_IMAGES,
    "truncate": {**B, "description": "cut a prompt beyond the context (the default) or answer 400"},
}
MESSAGE = _obj(
    {
        "role": {"enum": ["system", "developer", "user", "assistant", "tool"]},
        "content": S,
        "images": NO_IMAGES,
        "tool_calls": {"type": "array"},
        "tool_name": S,
    },
    ("role", "content"),
)
GENERATE_REQ = {
    **_obj(
        {
            **GEN_COMMON,
            "prompt": {**S, "description": "empty (with no suffix): load the model, or unload it with keep_alive 0"},
            "suffix": {**S, "description": "fill in the middle (models with FIM tokens)"},
            "system": S,
            "raw": B,
            "template": {**S, "maxLength": 0, "description": "not supported: the model's chat template is used"},
            "context": {"type": "array", "items": I},
        }
    ),
    **NAMED,
}
CHAT_REQ = {
    **_obj(
        {
            **GEN_COMMON,
            "messages": {"type": "array", "items": MESSAGE, "description": "empty: load (or unload) the model"},
            "tools": {"type": "array", "items": _obj({"type": {"const": "function"}, "function": _obj({"name": S})})},
        }
    ),
    **NAMED,
}
EMBED_REQ = {
    **_obj(
        {
            **BY_NAME,
            "input": {"oneOf": [S, {"type": "array", "items": S, "minItems": 1}]},
            "truncate": B,
            "dimensions": schema_of("dimensions", **{"x-modelc-embedding-width": True}),
            "options": OPTIONS,
            "keep_alive": KEEP_ALIVE,
        },
        ("input",),
    ),
    **NAMED,
}
EMBEDDINGS_REQ = {
    **_obj({**BY_NAME, "prompt": {**S, "minLength": 1}, "options": OPTIONS, "keep_alive": KEEP_ALIVE}, ("prompt",)),
    **NAMED,
}
SHOW_REQ = {**_obj({**BY_NAME, "verbose": B}), **NAMED}


def _ollama(summary: str, body: dict[str, Any], ndjson: bool = False) -> dict[str, Any]:
    op = _op(summary, {"type": "object"}, body, errors=GEN_ERRORS)
    if ndjson:
        op["responses"]["200"]["content"]["application/x-ndjson"] = {"schema": {**S, "description": "JSON lines"}}
    return op


CHAT_PATHS = {
    "/api/generate": {"post": _ollama("Ollama: generate a completion (NDJSON stream by default)", GENERATE_REQ, True)},
    "/api/chat": {"post": _ollama("Ollama: chat (NDJSON stream by default)", CHAT_REQ, True)},
    "/api/embed": {"post": _ollama("Ollama: embeddings of one text or a batch", EMBED_REQ)},
    "/api/embeddings": {"post": _ollama("Ollama (older): the embedding of one prompt", EMBEDDINGS_REQ)},
}
LORA_LOAD_REQ = _obj(
    {
        **BY_NAME,
        "path": {**S, "minLength": 1, "description": "a .safetensors adapter under the adapters folder"},
        "adapter": S,
        "alpha": N,
        "global": B,
    },
    ("path",),
)
LORA_UNLOAD_REQ = _obj({**BY_NAME, "adapter": {**S, "minLength": 1}}, ("adapter",))
ROUTE_PATHS = {
    "/api/show": {"post": _ollama("Ollama: a model's details, template and parameters", SHOW_REQ)},
    "/api/lora/load": {"post": _ollama("Load a LoRA adapter on a loaded model (control route)", LORA_LOAD_REQ)},
    "/api/lora/unload": {"post": _ollama("Unload a LoRA adapter (control route)", LORA_UNLOAD_REQ)},
}
