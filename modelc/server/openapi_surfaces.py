"""Hand-written OpenAPI entries of the other API surfaces (Anthropic Messages, OpenAI Responses,
infill, rerank, the web UI); each route module exposes its part as OPENAPI_PATHS, which
openapi.other_paths picks up."""

from __future__ import annotations

from typing import Any

from modelc.server.anthropic_shapes import THINKING
from modelc.server.bounds import schema_of
from modelc.server.openapi import GEN_ERRORS, MODEL_NAME, STOP, B, I, N, S, _obj, _op

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
ANTHROPIC_ERROR = _obj({"type": {"const": "error"}, "error": _obj({"type": S, "message": S})})
MESSAGES_REQ = _obj(
    {
        "model": MODEL_NAME,
        "max_tokens": schema_of("max_tokens"),
        "system": {"oneOf": [S, TEXT_BLOCKS]},
        "messages": {"type": "array", "items": {"oneOf": [USER_TURN, ASSISTANT_TURN]}, "minItems": 1},
        "stop_sequences": STOP["oneOf"][1],
        "stream": B,
        "temperature": schema_of("temperature"),
        "top_p": schema_of("top_p"),
        "top_k": schema_of("top_k"),
        "tools": {
            "type": "array",
            "items": _obj(
                {"type": {"const": "custom"}, "name": S, "description": S, "input_schema": {"type": "object"}},
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
        "thinking": _obj({"type": {"enum": sorted(THINKING)}, "budget_tokens": I}, ("type",)),
        "output_config": _obj(
            {"format": _obj({"type": {"const": "json_schema"}, "schema": {"type": "object"}}, ("type", "schema"))}
        ),
    },
    ("messages", "max_tokens"),
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
RESPONSES_REQ = _obj(
    {
        "model": S,
        "input": {"oneOf": [S, {"type": "array", "items": _obj({"type": S})}]},
        "instructions": S,
        "previous_response_id": S,
        "store": B,
        "stream": B,
        "max_output_tokens": I,
        "temperature": N,
        "top_p": N,
        "tools": {"type": "array", "items": _obj({"type": {"const": "function"}, "name": S, "parameters": _obj({})})},
        "tool_choice": {"oneOf": [S, _obj({"type": {"const": "function"}, "name": S})]},
        "parallel_tool_calls": B,
        "text": _obj({"format": _obj({"type": {"enum": ["text", "json_object", "json_schema"]}, "schema": _obj({})})}),
        "metadata": {"type": "object"},
    },
    ("input",),
)
RESPONSE = _obj(
    {
        "id": S,
        "object": {"const": "response"},
        "status": {"enum": ["completed", "incomplete", "in_progress"]},
        "output": {"type": "array", "items": _obj({"type": {"enum": ["message", "function_call"]}})},
        "usage": _obj({"input_tokens": I, "output_tokens": I, "total_tokens": I}),
    }
)


def _anthropic(op: dict[str, Any]) -> dict[str, Any]:
    for code, r in op["responses"].items():
        if code != "200":
            r["content"]["application/json"]["schema"] = ANTHROPIC_ERROR
    return op


ANTHROPIC = {
    "/v1/messages": {
        "post": _anthropic(
            _op(
                "Anthropic Messages API (SSE events when stream=true)",
                MESSAGE,
                MESSAGES_REQ,
                sse=True,
                errors=GEN_ERRORS,
            )
        )
    },
    "/v1/messages/count_tokens": {
        "post": _anthropic(_op("Anthropic token count of a Messages request", _obj({"input_tokens": I}), MESSAGES_REQ))
    },
}
RESPONSES = {
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
        "model": S,
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
    "Rerank documents for a query with a cross-encoder (Jina/Cohere shape)", RERANK_RESP, RERANK_REQ, errors=GEN_ERRORS
)
RERANK = {path: {"post": _RERANK_OP} for path in ("/v1/rerank", "/rerank", "/v1/reranking", "/reranking")}
