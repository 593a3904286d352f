"""The OpenAPI 3.1 description of every route the app serves (GET /openapi.json).

modelc.server's routes are described by hand here. Other route modules (the Ollama API in
server/ollama_*.py, registered on the daemon's app) come from their module's OPENAPI_PATHS dict
when it has one, else get a generated entry (summary from the view's docstring, JSON object in and
out, marked `x-modelc-generated`). tests/server/test_openapi.py checks that every rule in the app's
url_map appears with the same methods, and that the rest are all hand-written.
"""

from __future__ import annotations

import copy
import inspect
import re
import sys
from typing import Any

from modelc.server.bounds import MAX_STOP, MAX_STOP_CHARS, schema_of
from modelc.server.context import queue_capacity
from modelc.server.fim import find_fim_tokens
from modelc.server.guard import EXEMPT_PATHS
from modelc.server.served import GENERATE, INFER, RERANK, ServedModel
from modelc.version import __version__


def _obj(props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = list(required)
    return out


S = {"type": "string"}
I = {"type": "integer"}
N = {"type": "number"}
B = {"type": "boolean"}
ANY: dict[str, Any] = {}
STR_OR_LIST = {"oneOf": [S, {"type": "array", "items": S}]}
TOKEN_ID = {**I, "minimum": 0, "description": "a token id of the model's vocabulary", "x-modelc-token-id": True}
TOKEN_IDS = {"type": "array", "items": TOKEN_ID, "minItems": 1}
PROMPT = {
    "oneOf": [
        S,
        {"type": "array", "items": S, "minItems": 1},
        TOKEN_IDS,
        {"type": "array", "items": TOKEN_IDS, "minItems": 1},
    ]
}

MODEL_NAME = {
    **S,
    "maxLength": 255,
    "description": "a served or stored model name (at most 255 bytes of UTF-8)",
    "x-modelc-model-name": True,  # a server of one model lists its names (served_operations)
}
MODEL = MODEL_NAME
BOUNDED = (  # the sampling fields whose bounds come from server/bounds.BOUNDS
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "typical_p",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "min_tokens",
    "gamma",
    "n_keep",
    "max_context",
)
STOP = {
    "oneOf": [
        {**S, "minLength": 1, "maxLength": MAX_STOP_CHARS},
        {"type": "array", "items": {**S, "minLength": 1, "maxLength": MAX_STOP_CHARS}, "maxItems": MAX_STOP},
    ],
    "description": "stop strings; the stop text is not returned",
}
SAMPLING = {
    **{name: schema_of(name) for name in BOUNDED},
    "stop": STOP,
    "stop_token_ids": {"type": "array", "items": TOKEN_ID},
    "logit_bias": {
        "type": "object",
        "propertyNames": {"pattern": "^(0|[1-9][0-9]{0,8})$", "x-modelc-token-id-key": True},
        "additionalProperties": schema_of("logit_bias_value"),
        "description": "token id -> bias (ids must be in the model's vocabulary)",
    },
    "ignore_eos": B,
    "speculative": B,
    "context_shift": B,
    "truncate": {**B, "description": "cut a prompt beyond the context instead of answering 400"},
    "response_format": {
        **_obj(
            {
                "type": {"enum": ["text", "json_object", "json_schema"]},
                "json_schema": _obj({"name": S, "schema": {"type": "object"}, "strict": B}),
            },
            ("type",),
        ),
        "if": {"properties": {"type": {"const": "json_schema"}}},
        "then": {"required": ["json_schema"]},
    },
    "grammar": {
        "oneOf": [
            {**S, "description": "a regex"},
            _obj({"type": {"enum": ["regex", "lark", "gbnf"]}, "grammar": S}, ("type", "grammar")),
        ]
    },
    "json_schema": {"type": "object", "description": "native shorthand for response_format json_schema"},
    "user": S,
    "model": MODEL,
}
# server/schema.parse_constraint: at most one of a JSON response_format, grammar and json_schema
JSON_FORMAT = {
    "required": ["response_format"],
    "properties": {"response_format": {"properties": {"type": {"enum": ["json_object", "json_schema"]}}}},
}
ONE_CONSTRAINT = {
    "allOf": [
        {"not": {"required": ["grammar", "json_schema"]}},
        {"if": JSON_FORMAT, "then": {"not": {"anyOf": [{"required": ["grammar"]}, {"required": ["json_schema"]}]}}},
    ]
}
LORA = {  # server/lora_field.py
    "type": "array",
    "items": _obj({"id": {**I, "minimum": 0}, "scale": N}, ("id",)),
    "description": "llama-server's per-request LoRA mix: [{id, scale}] by GET /lora-adapters' ids; the loaded "
    "adapters not listed run at 0 for this request ([] is the base model); absent: the global scales",
}
OPENAI_GEN = {
    **SAMPLING,
    "max_tokens": schema_of("max_tokens", "openai_max_tokens"),
    "max_completion_tokens": schema_of(
        "max_completion_tokens", "openai_max_tokens", description="wins over max_tokens"
    ),
    "n": schema_of("n"),
    "stream": B,
    "stream_options": _obj({"include_usage": B}),
    "lora": LORA,
}
TEXT_PARTS = {"type": "array", "items": _obj({"type": {"enum": ["text", "input_text"]}, "text": S}, ("type", "text"))}
MESSAGE = {
    **_obj(
        {
            "role": {"enum": ["system", "developer", "user", "assistant", "tool"]},
            "content": {"oneOf": [S, {"type": "null"}, TEXT_PARTS]},
            "tool_calls": {"type": "array"},
            "tool_call_id": S,
            "name": S,
        },
        ("role",),
    ),
    "anyOf": [  # content may be left out (or null) only by an assistant message that calls tools
        {"properties": {"content": {"oneOf": [S, TEXT_PARTS]}}, "required": ["content"]},
        {"properties": {"role": {"const": "assistant"}, "tool_calls": {"minItems": 1}}, "required": ["tool_calls"]},
    ],
}
MESSAGES = {"type": "array", "items": MESSAGE, "minItems": 1}
TOOL = _obj(
    {
        "type": {"const": "function"},
        "function": _obj(
            {"name": {**S, "minLength": 1}, "description": S, "parameters": {"type": "object"}}, ("name",)
        ),
    },
    ("function",),
)
ERROR = _obj(
    {
        "error": _obj(
            {"message": S, "type": S, "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}
        )
    }
)
USAGE = _obj(
    {"prompt_tokens": I, "completion_tokens": I, "total_tokens": I, "prompt_tokens_details": _obj({"cached_tokens": I})}
)
EMBED_REQ = _obj(
    {
        "model": MODEL,
        "input": PROMPT,
        "encoding_format": {"enum": ["float", "base64"]},
        "dimensions": schema_of("dimensions", **{"x-modelc-embedding-width": True}),
        "truncate": {**B, "description": "cut each input to the context length instead of answering 400"},
        "user": S,
    },
    ("input",),
)
_LLAMA_PIECE = {"anyOf": [S, TOKEN_ID]}
LLAMA_CONTENT = {
    "description": "a string, token ids (maybe mixed with strings), or a list of those (one vector each)",
    "anyOf": [S, {"type": "array", "items": {"anyOf": [S, TOKEN_ID, {"type": "array", "items": _LLAMA_PIECE}]}}],
}
LLAMA_EMBED_REQ = _obj(  # llama-server's /embedding (and its /embeddings): server/llama_embedding.py
    {
        "content": LLAMA_CONTENT,
        "embd_normalize": {
            **I,
            "minimum": -1,
            "maximum": 64,
            "description": "-1 none, 0 max absolute (int16 range), 1 taxicab, 2 Euclidean (default), > 2 p-norm",
        },
        "truncate": {**B, "description": "cut each input to the context length instead of answering 400"},
        "model": MODEL,
    },
    ("content",),
)
LLAMA_EMBED_RESP = {
    "type": "array",
    "items": _obj({"index": I, "embedding": {"type": "array", "items": {"type": "array", "items": N}}}),
}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _op(
    summary: str,
    response: dict[str, Any],
    body: dict[str, Any] | None = None,
    *,
    sse: bool = False,
    errors: tuple[int, ...] = (400, 401, 429, 503),
    text: bool = False,
) -> dict[str, Any]:
    ok: dict[str, Any] = {"description": "OK", **_json(response)}
    if sse:
        ok["content"]["text/event-stream"] = {
            "schema": {**_obj({"event": S, "data": S, "id": S}), "description": "one SSE event (`data:` holds JSON)"}
        }
    if text:
        ok = {"description": "OK", "content": {"text/plain": {"schema": S}}}
    op: dict[str, Any] = {"summary": summary, "responses": {"200": ok}}
    for code in errors:
        op["responses"][str(code)] = {
            "description": {
                400: "invalid request",
                401: "missing or bad API key",
                404: "unknown model",
                408: "request timeout",
                413: "body too large",
                501: "not supported by this model",
                429: "rate limited",
                503: "loading or overloaded (Retry-After)",
            }[code],
            **_json(ERROR),
        }
    if body is not None:
        op["requestBody"] = {"required": True, **_json(body)}
    return op


GEN_ERRORS = (400, 401, 404, 408, 413, 429, 503)
CHAT_REQ = _obj(
    {
        **OPENAI_GEN,
        "messages": MESSAGES,
        "logprobs": B,
        "top_logprobs": schema_of("top_logprobs"),
        "tools": {"type": "array", "items": TOOL, "minItems": 1},
        "tool_choice": {
            "oneOf": [
                {"enum": ["auto", "none", "required"]},
                _obj({"type": {"const": "function"}, "function": _obj({"name": S})}),
            ]
        },
        "parallel_tool_calls": B,
        "chat_template_kwargs": {"type": "object"},
    },
    ("messages",),
)
CHAT_RESP = _obj(
    {
        "id": S,
        "object": {"const": "chat.completion"},
        "created": I,
        "model": S,
        "system_fingerprint": S,
        "usage": USAGE,
        "choices": {
            "type": "array",
            "items": _obj(
                {
                    "index": I,
                    "finish_reason": {"enum": ["stop", "length", "tool_calls", "abort"]},
                    "message": _obj(
                        {"role": S, "content": {"type": ["string", "null"]}, "tool_calls": {"type": "array"}}
                    ),
                    "logprobs": {"type": ["object", "null"]},
                }
            ),
        },
    }
)
COMPLETION_REQ = _obj(
    {
        **OPENAI_GEN,
        "prompt": PROMPT,
        "echo": B,
        "suffix": S,
        "best_of": schema_of("best_of"),
        "logprobs": schema_of("logprobs", "logprobs_count"),
    },
    ("prompt",),
)
COMPLETION_RESP = _obj(
    {
        "id": S,
        "object": {"const": "text_completion"},
        "created": I,
        "model": S,
        "usage": USAGE,
        "choices": {
            "type": "array",
            "items": _obj(
                {
                    "index": I,
                    "text": S,
                    "finish_reason": S,
                    "logprobs": {
                        "type": ["object", "null"],
                        "properties": {
                            "tokens": {"type": "array"},
                            "token_logprobs": {"type": "array"},
                            "top_logprobs": {"type": "array"},
                            "text_offset": {"type": "array"},
                        },
                    },
                }
            ),
        },
    }
)
MODEL_CARD = _obj({"id": S, "object": {"const": "model"}, "created": I, "owned_by": S})
NATIVE_GEN = _obj(
    {
        "top_p": schema_of("top_p", "top_p_native"),  # native: 0 = off
        **{
            k: SAMPLING[k]
            for k in (
                "max_tokens",
                "temperature",
                "min_p",
                "repetition_penalty",
                "presence_penalty",
                "frequency_penalty",
                "logit_bias",
                "seed",
                "stop",
                "grammar",
                "json_schema",
                "response_format",
                "top_k",
                "typical_p",
                "min_tokens",
                "stop_token_ids",
                "ignore_eos",
                "speculative",
                "gamma",
                "context_shift",
                "n_keep",
                "max_context",
                "truncate",
            )
        },
    }
)
STREAM_OPTIONS_NEED_STREAM = {
    "if": {"required": ["stream_options"]},
    "then": {"required": ["stream"], "properties": {"stream": {"const": True}}},
}
CHAT_NEEDS_TOOLS = {  # server/schema.parse_tools: a tool_choice other than none/auto needs tools
    "if": {"required": ["tool_choice"], "properties": {"tool_choice": {"not": {"enum": ["auto", "none"]}}}},
    "then": {"required": ["tools"]},
}
NATIVE_GEN.update(ONE_CONSTRAINT)
CHAT_REQ["allOf"] = [*ONE_CONSTRAINT["allOf"], STREAM_OPTIONS_NEED_STREAM, CHAT_NEEDS_TOOLS]
COMPLETION_REQ["allOf"] = [*ONE_CONSTRAINT["allOf"], STREAM_OPTIONS_NEED_STREAM]
SUMMARY = _obj(
    {"name": S, "architecture": S, "total_params": I, "total_bytes": I, "tensors": {"type": "array", "items": S}}
)
SINGLE_OR_BATCH = {
    **_obj({"input": {**S, "description": "one text"}, "inputs": {"type": "array", "items": S, "minItems": 1}}),
    "oneOf": [  # 'inputs' wins when both are sent ('input' is then not read)
        {"required": ["input"], "properties": {"input": S}, "not": {"required": ["inputs"]}},
        {"required": ["inputs"], "properties": {"input": {}}},
    ],
}


def openapi_spec(
    app: Any = None, served: ServedModel | None = None, *, only_model: bool = False, aliases: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The spec of modelc.server's routes, plus every other route of `app` when given. With the
    `served` model, the operations it can never answer are left out (see served_operations)."""
    spec = server_spec()
    if app is not None:
        spec["paths"].update(other_paths(app, spec["paths"]))
    if served is not None:
        served_operations(spec["paths"], served, only_model=only_model, aliases=aliases)
    _declare_path_params(spec["paths"])
    _declare_errors(spec["paths"])
    for path in EXEMPT_PATHS & spec["paths"].keys():  # probes answer without the API key
        for op in spec["paths"][path].values():
            op["security"] = []
            op["responses"].pop("401", None)
    return spec


OLLAMA_ERROR = _obj({"error": S}, ("error",))
ANTHROPIC_ERROR = _obj({"type": {"const": "error"}, "error": _obj({"type": S, "message": S})})
COHERE_ERROR = _obj({"message": S}, ("message",))
RERANK_PATHS = ("/v1/rerank", "/rerank", "/v1/reranking", "/reranking", "/v2/rerank")


def served_operations(
    paths: dict[str, Any], engine: ServedModel, *, only_model: bool, aliases: tuple[str, ...] = ()
) -> None:
    """Leave out of `paths` what this server can never answer for any request, as vLLM registers only
    the routes of its model's tasks: /infer unless the default model is an MLP/ONNX one; when it is
    the only model (no model manager to load others), rerank unless it is a cross-encoder and /infill
    unless its vocabulary has fill-in-the-middle tokens. (The routes stay: they answer a clear 400.)
    The only model's names (and aliases) are then the `model` values the server takes (others: 404)."""
    drop = [] if INFER in engine.serves else ["/infer"]
    if only_model:
        drop += [] if RERANK in engine.serves else list(RERANK_PATHS)
        tok = engine.tokenizer
        if GENERATE not in engine.serves or tok is None or find_fim_tokens(tok) is None:
            drop.append("/infill")
    for path in drop:
        paths.pop(path, None)
    if not only_model:
        return
    vocab = engine.tokenizer.vocab_size if engine.tokenizer is not None else None
    width = engine.source.config.get("hidden_size") if engine.source is not None else None
    _bound_by_model(
        paths,
        vocab if isinstance(vocab, int) and vocab > 0 else None,
        width if isinstance(width, int) else None,
        [engine.name, *aliases],
    )
    capacity = queue_capacity(engine)
    completions = paths.get("/v1/completions", {}).get("post")
    if capacity is not None and completions is not None:
        body = completions["requestBody"]["content"]["application/json"]
        body["schema"] = {**body["schema"], "allOf": [*body["schema"].get("allOf", []), *queue_rules(capacity)]}


def queue_rules(capacity: int) -> list[dict[str, Any]]:
    """server/context.check_num_sequences: a batch of prompts must fit the queue. (It is prompts x
    best_of that must fit; an if/then chain over n and best_of states that exactly, but schemathesis
    cannot generate bodies from it, so only the n = 1 bound is declared: a request with many
    prompts AND many choices can still be a 400.)"""
    batch = {"type": "array", "items": {"type": ["string", "array"]}}  # a list of prompts (not one token list)
    return [{"properties": {"prompt": {"if": batch, "then": {"maxItems": capacity}}}}]


def _bound_by_model(node: Any, vocab: int | None, width: int | None, names: list[str]) -> None:
    """The one served model's own limits: token ids below its vocabulary size (every schema marked as
    a token id or a logit_bias key), `dimensions` up to its embedding width, `model` one of its names.
    (Copies: the module's schemas are shared.)"""
    if isinstance(node, list):
        for i, item in enumerate(node):
            node[i] = _copy(item)
            _bound_by_model(node[i], vocab, width, names)
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        node[key] = value = _copy(value)
        _bound_by_model(value, vocab, width, names)
    if node.get("x-modelc-model-name"):
        node["enum"] = list(names)
    if vocab is not None and node.get("x-modelc-token-id"):
        node["maximum"] = vocab - 1
    if vocab is not None and node.get("x-modelc-token-id-key"):
        node["pattern"] = below_pattern(vocab)
    if width is not None and node.get("x-modelc-embedding-width"):
        node["maximum"] = width


def _copy(value: Any) -> Any:
    return dict(value) if isinstance(value, dict) else list(value) if isinstance(value, list) else value


def below_pattern(n: int) -> str:
    """A regex of the decimal numbers 0..n-1 (no leading zeros), n >= 1."""
    top = str(n - 1)
    alts = ["[0-9]" if len(top) > 1 else f"[0-{top}]"]
    alts += [f"[1-9][0-9]{{{k - 1}}}" for k in range(2, len(top))]
    if len(top) > 1:
        for i, d in enumerate(top):
            lo = 1 if i == 0 else 0
            if int(d) > lo:
                alts.append(f"{top[:i]}[{lo}-{int(d) - 1}][0-9]{{{len(top) - i - 1}}}")
        alts.append(top)
    return "^(" + "|".join(alts) + ")$"


def error_schema(path: str) -> dict[str, Any]:
    """The error body of the API `path` is on (server/errors.api_of_request): Ollama's on /api/*,
    Anthropic's on /v1/messages*, Cohere's on /v2/rerank, OpenAI's elsewhere."""
    if path.startswith("/api/"):
        return OLLAMA_ERROR
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return ANTHROPIC_ERROR
    if path == "/v2/rerank":
        return COHERE_ERROR
    return ERROR


def _declare_errors(paths: dict[str, Any]) -> None:
    """Every operation may answer 403 (server/guard.py: Host, Origin, control token); every error body
    is in the shape of the path's API (error_schema)."""
    for path, ops in paths.items():
        schema = error_schema(path)
        for op in ops.values():
            responses = op.setdefault("responses", {})
            responses.setdefault("403", {"description": "forbidden (Host, Origin or control token)", **_json(ERROR)})
            for code, resp in responses.items():
                if code[:1] in ("4", "5") and "application/json" in resp.get("content", {}):
                    resp["content"]["application/json"]["schema"] = schema


def _declare_path_params(paths: dict[str, Any]) -> None:
    """Every {name} in a path is a declared, required string parameter of each of its operations."""
    for path, ops in paths.items():
        names = re.findall(r"\{([^}]+)\}", path)
        for op in ops.values() if names else ():
            have = {p.get("name") for p in op.get("parameters", []) if p.get("in") == "path"}
            extra = [{"name": n, "in": "path", "required": True, "schema": S} for n in names if n not in have]
            if extra:
                op["parameters"] = [*op.get("parameters", []), *extra]


def other_paths(app: Any, known: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, dict[str, Any]] = {}
    for rule in app.url_map.iter_rules():
        path = re.sub(r"<(?:[^:>]+:)?([^>]+)>", r"{\1}", rule.rule)
        if path in known:
            continue
        view = app.view_functions[rule.endpoint]
        given = getattr(sys.modules.get(view.__module__), "OPENAPI_PATHS", {}).get(path)
        if given is not None:
            out[path] = given
            continue
        doc = (inspect.getdoc(view) or view.__name__.replace("_", " ")).splitlines()[0]
        for method in sorted(m.lower() for m in rule.methods - {"HEAD", "OPTIONS"}):
            op = _op(doc, {"type": "object"}, {"type": "object"} if method in ("post", "put", "delete") else None)
            out.setdefault(path, {})[method] = {**op, "x-modelc-generated": True}
    return out


# The OpenAI paths without /v1 (llama.cpp's server and vLLM answer both): the same operations.
# (/embeddings is the native route, which also takes OpenAI's body; /responses* are in openapi_surfaces.)
OPENAI_ALIASES = {
    "/chat/completions": "/v1/chat/completions",
    "/completions": "/v1/completions",
    "/models": "/v1/models",
    "/models/{model_id}": "/v1/models/{model_id}",
}


def alias_of(ops: dict[str, Any], of: str) -> dict[str, Any]:
    """The operations of path `of`, described again for a path that answers exactly as it does."""
    out = copy.deepcopy(ops)
    for op in out.values():
        op["summary"] = f"{op['summary']} (alias of {of})"
        op["x-modelc-alias-of"] = of
    return out


def server_spec() -> dict[str, Any]:
    with_messages = {
        **NATIVE_GEN,
        "properties": {**NATIVE_GEN["properties"], "messages": MESSAGES},
        "required": ["messages"],
    }
    with_prompt = {**NATIVE_GEN, "properties": {**NATIVE_GEN["properties"], "prompt": S}, "required": ["prompt"]}
    paths = {
        "/v1/chat/completions": {
            "post": _op(
                "OpenAI chat completion (SSE when stream=true)", CHAT_RESP, CHAT_REQ, sse=True, errors=GEN_ERRORS
            )
        },
        "/v1/completions": {
            "post": _op(
                "OpenAI text completion (SSE when stream=true)",
                COMPLETION_RESP,
                COMPLETION_REQ,
                sse=True,
                errors=GEN_ERRORS,
            )
        },
        "/v1/embeddings": {
            "post": _op(
                "OpenAI embeddings: mean-pooled final hidden state, L2-normalized",
                _obj({"object": S, "model": S, "usage": USAGE, "data": {"type": "array"}}),
                EMBED_REQ,
                errors=GEN_ERRORS,
            )
        },
        "/v1/models": {
            "get": _op(
                "The served model",
                _obj({"object": S, "data": {"type": "array", "items": MODEL_CARD}}),
                errors=(401, 429, 503),
            )
        },
        "/v1/models/{model_id}": {
            "get": {
                **_op("One model", MODEL_CARD, errors=(401, 404, 429, 503)),
                "parameters": [{"name": "model_id", "in": "path", "required": True, "schema": S}],
            }
        },
        "/health": {
            "get": _op(
                "Liveness: 200 ok, 503 while loading", _obj({"status": S, "model": S, "architecture": S}), errors=(503,)
            )
        },
        "/info": {"get": _op("Model summary", SUMMARY, errors=(503,))},
        "/props": {
            "get": _op(
                "llama.cpp-style server properties",
                _obj(
                    {
                        "model": S,
                        "architecture": S,
                        "total_params": I,
                        "total_bytes": I,
                        "chat_template": {"type": ["string", "null"]},
                        "default_generation": {"type": "object"},
                    }
                ),
                errors=(503,),
            )
        },
        "/v1/system": {
            "get": _op(
                "Host and model facts",
                _obj(
                    {
                        "model": S,
                        "architecture": S,
                        "total_params": I,
                        "total_bytes": I,
                        "cpu_cores": I,
                        "os": S,
                        "cpu_arch": S,
                        "pointer_width": I,
                        "metal_available": B,
                        "memory_total_bytes": {"type": ["integer", "null"]},
                    }
                ),
                errors=(401, 429, 503),
            )
        },
        "/api/version": {"get": _op("Version and git sha", _obj({"version": S, "git_sha": S}), errors=(401, 429))},
        "/metrics": {"get": _op("Prometheus metrics", ANY, errors=(), text=True)},
        "/openapi.json": {"get": _op("This document", {"type": "object"}, errors=(401, 429))},
        "/infer": {
            "post": _op(
                "Run an MLP/ONNX model on numeric input",
                _obj({"output": ANY, "outputs": ANY}),
                _obj({"input": ANY, "inputs": ANY}),
                errors=GEN_ERRORS,
            )
        },
        "/chat": {
            "post": _op(
                "Native chat (greedy by default)",
                _obj({"message": _obj({"role": S, "content": S})}),
                with_messages,
                errors=GEN_ERRORS,
            )
        },
        "/chat/stream": {
            "post": _op(
                "Native chat as SSE {delta, done}",
                _obj({"delta": S, "done": B}),
                with_messages,
                sse=True,
                errors=GEN_ERRORS,
            )
        },
        "/complete": {"post": _op("Native completion", _obj({"completion": S}), with_prompt, errors=GEN_ERRORS)},
        "/embeddings": {
            "post": _op(
                "Native embeddings ({input} or {inputs}); a body with OpenAI's fields (model, encoding_format, "
                "dimensions, user) or a list input is OpenAI's embeddings, answered as /v1/embeddings; llama-server's "
                "{content} (without input) is answered as /embedding",
                {
                    "anyOf": [
                        _obj(
                            {
                                "embedding": {"type": "array"},
                                "embeddings": {"type": "array"},
                                "model": S,
                                "object": S,
                                "data": {"type": "array"},
                                "usage": USAGE,
                            }
                        ),
                        LLAMA_EMBED_RESP,
                    ]
                },
                {"anyOf": [SINGLE_OR_BATCH, EMBED_REQ, LLAMA_EMBED_REQ]},
                errors=GEN_ERRORS,
            )
        },
        "/tokenize": {
            "post": _op(
                "Text -> token ids",
                _obj({"tokens": {"type": "array"}, "tokens_batch": {"type": "array"}, "count": I}),
                {
                    "anyOf": [
                        {**SINGLE_OR_BATCH, "properties": {**SINGLE_OR_BATCH["properties"], "add_special": B}},
                        _obj(
                            {"content": {**S, "description": "llama.cpp's field"}, "add_special": B, "with_pieces": B},
                            ("content",),
                        ),  # fmt: skip
                    ]
                },
            )
        },
        "/detokenize": {
            "post": _op(
                "Token ids -> text",
                _obj({"text": S, "content": S}),
                _obj({"tokens": {"type": "array", "items": TOKEN_ID}}, ("tokens",)),
            )
        },
        "/lora/load": {
            "post": _op(
                "Load a LoRA adapter",
                _obj({"name": S, "applied": I, "skipped": I, "global": B, "message": S}),
                _obj({"path": {**S, "minLength": 1}, "alpha": N, "name": S, "global": B}, ("path",)),
                errors=(400, 401, 404),
            )
        },
        "/lora/unload": {
            "post": _op(
                "Unload a LoRA adapter",
                _obj({"message": S}),
                _obj({"name": {**S, "minLength": 1}}, ("name",)),
                errors=(400, 401, 404),
            )
        },
    }
    for alias, of in OPENAI_ALIASES.items():
        paths[alias] = alias_of(paths[of], of)
    return {
        "openapi": "3.1.0",
        "info": {"title": "modelc", "version": __version__},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
        "paths": paths,
    }
