"""Hand-written OpenAPI entries of the other API surfaces (Anthropic Messages, OpenAI Responses,
infill, rerank, the web UI); each route module exposes its part as OPENAPI_PATHS, which
openapi.other_paths picks up."""

from __future__ import annotations

from modelc.server.anthropic_shapes import EXTENSIONS, THINKING
from modelc.server.bounds import schema_of
from modelc.server.openapi import GEN_ERRORS, LORA, MODEL_NAME, SAMPLING, STOP, B, I, N, S, _obj, _op, alias_of
from modelc.server.responses_shapes import EFFORTS, TEXT_PARTS

TEXT_BLOCK = _obj({"type": {"const": "text"}, "text": S}, ("type", "text"))
TEXT_BLOCKS = {"type": "array", "items": TEXT_BLOCK}
TOOL_RESULT_BLOCK = _obj(
    {
        "type": {"const": "tool_result"},
        "tool_use_id": S,
        "content": {"oneOf": [S, {"type": "null"}, TEXT_BLOCKS]},
        "is_error": B,
    },
    ("type", "tool_use_id"),
)
TOOL_USE_BLOCK = _obj(
    {"type": {"const": "tool_use"}, "id": S, "name": S, "input": {"type": "object"}}, ("type", "name")
)
THINKING_BLOCK = _obj({"type": {"enum": ["thinking", "redacted_thinking"]}}, ("type",))
USER_TURN = _obj(
    {
        "role": {"const": "user"},
        "content": {
            "oneOf": [S, {"type": "array", "items": {"oneOf": [TEXT_BLOCK, TOOL_RESULT_BLOCK]}, "minItems": 1}]
        },
    },
    ("role", "content"),
)
ASSISTANT_TURN = _obj(
    {
        "role": {"const": "assistant"},
        "content": {"oneOf": [S, {"type": "array", "items": {"oneOf": [TEXT_BLOCK, TOOL_USE_BLOCK, THINKING_BLOCK]}}]},
    },
    ("role", "content"),
)
MESSAGES_REQ = _obj(
    {
        "model": MODEL_NAME,
        "max_tokens": schema_of("max_tokens", "anthropic_max_tokens"),
        "system": {"oneOf": [S, TEXT_BLOCKS]},
        "messages": {"type": "array", "items": {"oneOf": [USER_TURN, ASSISTANT_TURN]}, "minItems": 1},
        "stop_sequences": STOP["oneOf"][1],
        "stream": B,
        **{name: SAMPLING[name] for name in EXTENSIONS},
        "temperature": schema_of("temperature", "anthropic_temperature"),
        "top_k": schema_of("top_k", "anthropic_top_k"),
        "tools": {
            "type": "array",
            "items": _obj(
                {
                    "type": {"const": "custom"},
                    "name": {**S, "minLength": 1},
                    "description": S,
                    "input_schema": {"type": "object"},
                },
                ("name",),
            ),
        },
        "tool_choice": {
            **_obj(
                {"type": {"enum": ["auto", "any", "tool", "none"]}, "name": S, "disable_parallel_tool_use": B},
                ("type",),
            ),
            "if": {"properties": {"type": {"const": "tool"}}},
            "then": {"required": ["name"]},
        },
        "thinking": {
            **_obj({"type": {"enum": sorted(THINKING)}, "budget_tokens": schema_of("budget_tokens")}, ("type",)),
            "if": {"properties": {"type": {"const": "enabled"}}},
            "then": {"required": ["budget_tokens"]},
        },
        "output_config": _obj(
            {"format": _obj({"type": {"const": "json_schema"}, "schema": {"type": "object"}}, ("type", "schema"))}
        ),
    },
    ("messages", "max_tokens"),
)
MESSAGES_REQ.update(  # tool_choice any/tool needs tools
    {
        "if": {
            "required": ["tool_choice"],
            "properties": {"tool_choice": {"properties": {"type": {"enum": ["any", "tool"]}}}},
        },
        "then": {"required": ["tools"], "properties": {"tools": {"minItems": 1}}},
    }
)
MESSAGE = _obj(
    {
        "id": S,
        "type": {"const": "message"},
        "role": {"const": "assistant"},
        "model": S,
        "content": {"type": "array", "items": _obj({"type": {"enum": ["text", "tool_use", "thinking"]}})},
        "stop_reason": {"enum": ["end_turn", "max_tokens", "stop_sequence", "tool_use"]},
        "stop_sequence": {"type": ["string", "null"]},
        "usage": _obj({"input_tokens": I, "output_tokens": I, "cache_read_input_tokens": I}),
    }
)
RESP_TEXT = {
    "oneOf": [S, {"type": "array", "items": _obj({"type": {"enum": list(TEXT_PARTS)}, "text": S}, ("type", "text"))}]
}
RESP_ITEM = {
    "oneOf": [
        _obj(
            {
                "type": {"const": "message"},
                "role": {"enum": ["user", "assistant", "system", "developer"]},
                "content": RESP_TEXT,
            },
            ("role", "content"),
        ),
        _obj(
            {"type": {"const": "function_call"}, "call_id": S, "name": S, "arguments": S, "id": S},
            ("type", "call_id", "name"),
        ),
        _obj({"type": {"const": "function_call_output"}, "call_id": S, "output": RESP_TEXT}, ("type", "call_id")),
        _obj({"type": {"const": "reasoning"}}, ("type",)),
    ]
}
NEEDS_TOOLS = {  # a tool_choice other than auto/none needs tools
    "if": {"required": ["tool_choice"], "properties": {"tool_choice": {"not": {"enum": ["auto", "none"]}}}},
    "then": {"required": ["tools"], "properties": {"tools": {"minItems": 1}}},
}
RESPONSES_REQ = {
    **_obj(
        {
            "model": MODEL_NAME,
            "input": {"oneOf": [S, {"type": "array", "items": RESP_ITEM, "minItems": 1}]},
            "instructions": S,
            "previous_response_id": S,
            "store": B,
            "stream": B,
            "max_output_tokens": schema_of("max_output_tokens"),
            **{name: SAMPLING[name] for name in EXTENSIONS},
            "n": schema_of("n", "responses_n"),
            "top_logprobs": schema_of("top_logprobs"),
            "include": {"type": "array", "items": S},
            "reasoning": _obj({"effort": {"enum": list(EFFORTS)}, "summary": S}),
            "background": {**B, "enum": [False], "description": "background responses are not supported"},
            "tools": {
                "type": "array",
                "items": _obj(
                    {
                        "type": {"const": "function"},
                        "name": {**S, "minLength": 1},
                        "description": S,
                        "parameters": {"type": "object"},
                    },
                    ("type", "name"),
                ),
            },
            "tool_choice": {
                "oneOf": [
                    {"enum": ["auto", "none", "required"]},
                    _obj({"type": {"const": "function"}, "name": S}, ("type", "name")),
                ]
            },
            "parallel_tool_calls": B,
            "text": _obj(
                {
                    "format": {
                        **_obj(
                            {
                                "type": {"enum": ["text", "json_object", "json_schema"]},
                                "name": S,
                                "schema": {"type": "object"},
                            },
                            ("type",),
                        ),
                        "if": {"properties": {"type": {"const": "json_schema"}}},
                        "then": {"required": ["schema"]},
                    }
                }
            ),
            "metadata": {"type": "object"},
        },
        ("input",),
    ),
    **NEEDS_TOOLS,
}
RESPONSE = _obj(
    {
        "id": S,
        "object": {"const": "response"},
        "status": {"enum": ["completed", "incomplete", "in_progress"]},
        "output": {"type": "array", "items": _obj({"type": {"enum": ["message", "function_call"]}})},
        "usage": _obj({"input_tokens": I, "output_tokens": I, "total_tokens": I}),
    }
)


ANTHROPIC = {
    "/v1/messages": {
        "post": _op(
            "Anthropic Messages API (SSE events when stream=true)", MESSAGE, MESSAGES_REQ, sse=True, errors=GEN_ERRORS
        )
    },
    "/v1/messages/count_tokens": {
        "post": _op(
            "Anthropic token count of a Messages request",
            _obj({"input_tokens": I}),
            {**MESSAGES_REQ, "required": ["messages"]},  # no max_tokens needed to count
            errors=GEN_ERRORS,
        )
    },
}
INPUT_ITEMS = _obj(
    {
        "object": {"const": "list"},
        "data": {"type": "array", "items": _obj({"id": S, "type": S}, ("id", "type"))},
        "first_id": {"type": ["string", "null"]},
        "last_id": {"type": ["string", "null"]},
        "has_more": B,
    },
    ("object", "data", "has_more"),
)
_INPUT_ITEMS_PARAMS = [
    {"name": "limit", "in": "query", "schema": schema_of("limit", "input_items_limit")},
    {"name": "order", "in": "query", "schema": {"enum": ["asc", "desc"]}},
    {"name": "after", "in": "query", "schema": S},
    {"name": "before", "in": "query", "schema": S},
]
_V1_RESPONSES = {
    "/v1/responses": {
        "post": _op(
            "OpenAI Responses API (typed SSE events when stream=true)",
            RESPONSE,
            RESPONSES_REQ,
            sse=True,
            errors=GEN_ERRORS,
        )
    },
    "/v1/responses/{response_id}": {
        "get": _op("A stored response", RESPONSE, errors=(401, 404)),
        "delete": _op("Delete a stored response", _obj({"id": S, "deleted": B}), errors=(401, 404)),
    },
    "/v1/responses/{response_id}/input_items": {
        "get": {
            **_op(
                "The input items of a stored response (OpenAI's paginated list)", INPUT_ITEMS, errors=(400, 401, 404)
            ),
            "parameters": _INPUT_ITEMS_PARAMS,
        }
    },
}
RESPONSES = {  # and the same paths without /v1
    **_V1_RESPONSES,
    **{path.removeprefix("/v1"): alias_of(ops, path) for path, ops in _V1_RESPONSES.items()},
}
INFILL_REQ = _obj(
    {
        "input_prefix": S,
        "input_suffix": S,
        "input_extra": {"type": "array", "items": _obj({"filename": S, "text": S})},
        "prompt": {**S, "description": "text after the FIM middle token"},
        "n_predict": I,
        "max_tokens": I,
        "temperature": N,
        "top_k": I,
        "top_p": N,
        "min_p": N,
        "seed": I,
        "stop": {"type": "array", "items": S},
        "repeat_penalty": N,
        "stream": B,
        "model": S,
        "lora": LORA,
    }
)
INFILL_RESP = _obj(
    {
        "content": S,
        "stop": B,
        "tokens_predicted": I,
        "tokens_evaluated": I,
        "stop_type": {"enum": ["eos", "limit", "word"]},
        "stopping_word": S,
        "prompt": S,
        "timings": {"type": "object"},
    }
)
INFILL = {
    "/infill": {
        "post": _op(
            "llama.cpp code infill (fill-in-the-middle models; SSE when stream=true)",
            INFILL_RESP,
            INFILL_REQ,
            sse=True,
            errors=GEN_ERRORS,
        )
    }
}
_PROMPT_PIECE = {"anyOf": [S, I]}
COMPLETION_REQ = _obj(
    {
        "prompt": {
            "description": "a string, token ids (maybe mixed with strings), or a list of those (one answer each)",
            "anyOf": [S, {"type": "array", "items": {"anyOf": [S, I, {"type": "array", "items": _PROMPT_PIECE}]}}],
        },
        "n_predict": I,
        "n_probs": I,
        "n_cmpl": I,
        "temperature": N,
        "top_k": I,
        "top_p": N,
        "min_p": N,
        "typical_p": N,
        "seed": I,
        "stop": {"type": "array", "items": S},
        "repeat_penalty": N,
        "presence_penalty": N,
        "frequency_penalty": N,
        "logit_bias": {"anyOf": [{"type": "array"}, {"type": "object"}]},
        "grammar": S,
        "json_schema": {"type": "object"},
        "return_tokens": B,
        "stream": B,
        "model": S,
        "lora": LORA,
    },
    ("prompt",),
)
COMPLETION = {
    "/completion": {
        "post": _op(
            "llama.cpp's native completion (SSE when stream=true; an array for several prompts)",
            {
                "anyOf": [
                    {
                        **INFILL_RESP,
                        "properties": {**INFILL_RESP["properties"], "completion_probabilities": {"type": "array"}},
                    },
                    {"type": "array"},
                ]
            },  # fmt: skip
            COMPLETION_REQ,
            sse=True,
            errors=GEN_ERRORS,
        )
    },
    "/apply-template": {
        "post": _op(
            "llama.cpp's: a chat-completions body -> the chat template's prompt text",
            _obj({"prompt": S}),
            _obj(
                {
                    "messages": {"type": "array", "items": {"type": "object"}, "minItems": 1},
                    "tools": {"type": "array"},
                    "model": S,
                },
                ("messages",),
            ),  # fmt: skip
            errors=GEN_ERRORS,
        )
    },
}
WEBUI = {  # public routes (server/guard.public_route): no API key
    "/": {
        "get": {
            **_op("The chat web UI (browsers) or 'Ollama is running' (API clients)", S, text=True, errors=()),
            "security": [],
        }
    },
    "/webui/{name}": {"get": {**_op("A static file of the web UI", S, text=True, errors=(404,)), "security": []}},
}
RERANK_REQ = _obj(
    {
        "model": MODEL_NAME,
        "query": S,
        "documents": {"type": "array", "items": {"oneOf": [S, _obj({"text": S}, ("text",))]}},
        "top_n": schema_of("top_n"),
        "return_documents": B,
        "truncate": B,
    },
    ("query", "documents"),
)
RERANK_RESP = _obj(
    {
        "id": S,
        "model": S,
        "results": {
            "type": "array",
            "items": _obj({"index": I, "relevance_score": N, "logit": N, "document": _obj({"text": S})}),
        },
        "usage": _obj({"prompt_tokens": I, "total_tokens": I}),
    }
)
_RERANK_OP = _op(
    "Rerank documents for a query with a cross-encoder (Jina/Cohere v1 shape)",
    RERANK_RESP,
    RERANK_REQ,
    errors=GEN_ERRORS,
)
RERANK_V2_REQ = _obj(
    {
        "model": MODEL_NAME,
        "query": S,
        "documents": {"type": "array", "items": S, "minItems": 1, "maxItems": 1000},
        "top_n": schema_of("top_n"),
        "max_tokens_per_doc": schema_of("max_tokens_per_doc"),
        "priority": I,
    },
    ("query", "documents"),
)
RERANK_V2_RESP = _obj(
    {
        "id": S,
        "results": {"type": "array", "items": _obj({"index": I, "relevance_score": N}, ("index", "relevance_score"))},
        "meta": {"type": "object"},
    },
    ("results",),
)
_RERANK_V2_OP = _op(
    "Cohere's v2 rerank (cohere.ClientV2.rerank): long documents are cut, not refused",
    RERANK_V2_RESP,
    RERANK_V2_REQ,
    errors=GEN_ERRORS,
)
RERANK = {
    **{path: {"post": _RERANK_OP} for path in ("/v1/rerank", "/rerank", "/v1/reranking", "/reranking")},
    "/v2/rerank": {"post": _RERANK_V2_OP},
}
