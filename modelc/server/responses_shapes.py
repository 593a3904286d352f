"""The OpenAI Responses API's shapes: a /v1/responses body -> chat messages + a chat-completions body
(so openai_chat.parse_chat serves it), a finished choice -> output items and the `response` object.
The store behind previous_response_id is responses_store.py.

Pure, no awaits. Field names follow the OpenAI API reference (platform.openai.com/docs/api-reference/responses).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from modelc.errors import InvalidRequestError
from modelc.server.anthropic_shapes import EXTENSIONS
from modelc.server.bounds import bounded_int
from modelc.server.schema import bad, get_bool

TEXT_PARTS = ("input_text", "output_text", "text")


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def _parts_text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad(where, "must be a string or a list of content parts")
    out = []
    for i, p in enumerate(content):
        if not isinstance(p, dict) or p.get("type") not in TEXT_PARTS or not isinstance(p.get("text"), str):
            kind = p.get("type") if isinstance(p, dict) else type(p).__name__
            raise bad(f"{where}[{i}]", f"content part of type {kind!r} is not supported (text only)")
        out.append(p["text"])
    return "".join(out)


def input_messages(value: Any) -> list[dict[str, Any]]:
    """`input` (a string or a list of items) -> chat messages. function_call items join the assistant
    turn before them as tool_calls; function_call_output items become `tool` messages."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise bad("input", "must be a string or a non-empty list of input items")
    out: list[dict[str, Any]] = []
    for i, item in enumerate(value):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad(where, "must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise bad(f"{where}.role", f"must be user, assistant, system or developer, got {role!r}")
            out.append(
                {
                    "role": "system" if role == "developer" else role,
                    "content": _parts_text(item.get("content"), f"{where}.content"),
                }
            )
        elif kind == "function_call":
            if not isinstance(item.get("name"), str) or not isinstance(item.get("call_id"), str):
                raise bad(where, "a function_call item needs 'call_id' and 'name'")
            args = item.get("arguments", "{}")
            call = {"id": item["call_id"], "type": "function", "function": {"name": item["name"], "arguments": args}}
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            elif last is not None and last["role"] == "assistant":
                last["tool_calls"] = [call]
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str):
                raise bad(f"{where}.call_id", "is required")
            output = _parts_text(item.get("output", ""), f"{where}.output")
            out.append({"role": "tool", "tool_call_id": item["call_id"], "content": output})
        elif kind == "reasoning":
            continue  # earlier reasoning is not fed back
        else:
            raise bad(f"{where}.type", f"input item type {kind!r} is not supported")
    return out


def input_items(value: Any) -> list[dict[str, Any]]:
    """`input` (already checked by input_messages) as OpenAI lists it under /input_items: every item
    with an id, a message's content as parts (input_text; output_text for the assistant's)."""
    if isinstance(value, str):
        value = [{"type": "message", "role": "user", "content": value}]
    out = []
    for item in value:
        kind = item.get("type", "message")
        if kind == "message":
            text = "output_text" if item.get("role") == "assistant" else "input_text"
            content = item.get("content")
            parts = [{"type": text, "text": content}] if isinstance(content, str) else list(content)
            new = {"type": "message", "role": item.get("role"), "content": parts, "status": "completed"}
            out.append({"id": item.get("id") or new_id("msg"), **new})
        else:
            prefix = {"function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}.get(kind, "item")
            out.append({**item, "id": item.get("id") or new_id(prefix)})
    return out


def _tools(body: dict[str, Any]) -> list[dict[str, Any]] | None:
    tools = body.get("tools")
    if tools is None or tools == []:
        return None
    if not isinstance(tools, list):
        raise bad("tools", "must be a list")
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or t.get("type") != "function":
            kind = t.get("type") if isinstance(t, dict) else None
            raise bad(f"tools[{i}].type", f"only function tools are supported, got {kind!r}")
        if not isinstance(t.get("name"), str) or not t["name"]:
            raise bad(f"tools[{i}].name", "is required")
        fn = {"name": t["name"], "parameters": t.get("parameters") or {"type": "object", "properties": {}}}
        if isinstance(t.get("description"), str):
            fn["description"] = t["description"]
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(choice: Any) -> Any:
    if choice is None or isinstance(choice, str):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise bad("tool_choice", "must be auto, none, required or {'type': 'function', 'name': ...}")


def _response_format(text: Any) -> dict[str, Any] | None:
    if text is None:
        return None
    if not isinstance(text, dict):
        raise bad("text", "must be an object")
    f = text.get("format")
    if f is None:
        return None
    if not isinstance(f, dict) or f.get("type") not in ("text", "json_object", "json_schema"):
        raise bad("text.format", "must be {'type': 'text' | 'json_object' | 'json_schema', ...}")
    if f["type"] == "json_schema":
        if not isinstance(f.get("schema"), dict):
            raise bad("text.format.schema", "is required for json_schema")
        return {"type": "json_schema", "json_schema": {"name": f.get("name", "output"), "schema": f["schema"]}}
    return {"type": f["type"]}


# reasoning.effort -> the chat template's switches: gpt-oss reads reasoning_effort (low/medium/high),
# Qwen3/SmolLM3 enable_thinking and Granite thinking; "none" turns thinking off.
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
LOGPROBS_INCLUDE = "message.output_text.logprobs"


def _reasoning_kwargs(reasoning: Any) -> dict[str, Any]:
    if reasoning is None:
        return {}
    if not isinstance(reasoning, dict):
        raise bad("reasoning", "must be an object such as {'effort': 'low'}")
    effort = reasoning.get("effort")
    if effort is None:
        return {}
    if not isinstance(effort, str) or effort not in EFFORTS:
        raise bad("reasoning.effort", f"must be one of {', '.join(EFFORTS)}, got {json.dumps(effort)[:40]}")
    if effort == "none":
        return {"enable_thinking": False, "thinking": False}
    level = {"minimal": "low", "xhigh": "high"}.get(effort, effort)
    return {"enable_thinking": True, "thinking": True, "reasoning_effort": level}


def _include(body: dict[str, Any]) -> list[str]:
    include = body.get("include")
    if include is None:
        return []
    if not isinstance(include, list) or not all(isinstance(x, str) for x in include):
        raise bad("include", "must be a list of strings")
    return include


def _refuse_unsupported(body: dict[str, Any]) -> None:
    """What the Responses API has and modelc does not do: refused with a 400, never answered as if done."""
    if get_bool(body, "background"):
        raise bad(
            "background",
            "is not supported: modelc answers every response in the request that creates it; "
            "send 'stream': true to read it while it is generated",
        )
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or n != 1):  # BOUNDS["responses_n"] in /openapi.json
        raise bad("n", "must be 1: a response has one output (use /v1/chat/completions with 'n' for several)")


def chat_body(body: dict[str, Any], history: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A Responses request (+ the stored conversation before it) -> (chat-completions body, the
    conversation to store: history + this input, without instructions)."""
    if "input" not in body:
        raise bad("input", "is required")
    conversation = [*history, *input_messages(body["input"])]
    messages = list(conversation)
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise bad("instructions", "must be a string")
        messages.insert(0, {"role": "system", "content": instructions})
    out: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    max_output = bounded_int(body, "max_output_tokens", None)
    if max_output is not None:
        out["max_tokens"] = max_output
    _refuse_unsupported(body)
    kwargs = _reasoning_kwargs(body.get("reasoning"))
    if kwargs:
        out["chat_template_kwargs"] = kwargs
    top = bounded_int(body, "top_logprobs", 0) or 0
    if top or LOGPROBS_INCLUDE in _include(body):
        out["logprobs"] = True
        out["top_logprobs"] = top
    for name in ("stream", "parallel_tool_calls", *EXTENSIONS):
        if body.get(name) is not None:
            out[name] = body[name]
    tools = _tools(body)
    if tools is not None:
        out["tools"] = tools
        choice = _tool_choice(body.get("tool_choice"))
        if choice is not None:
            out["tool_choice"] = choice
    elif body.get("tool_choice") not in (None, "auto", "none"):
        raise InvalidRequestError("'tool_choice' needs 'tools'", param="tool_choice")
    fmt = _response_format(body.get("text"))
    if fmt is not None:
        out["response_format"] = fmt
    return out, conversation


def message_item(
    item_id: str, text: str, status: str = "completed", logprobs: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": [output_text(text, logprobs)] if status != "in_progress" else [],
    }


def reasoning_item(item_id: str, text: str) -> dict[str, Any]:
    """The model's thoughts (its reasoning text as generated; no summary is made)."""
    return {
        "id": item_id,
        "type": "reasoning",
        "status": "completed",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
    }


def output_text(text: str, logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An output_text part; `logprobs` are chat completions' entries ({token, logprob, bytes,
    top_logprobs}), the shape OpenAI gives them here too."""
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def function_call_item(call: dict[str, Any], status: str = "completed") -> dict[str, Any]:
    return {
        "id": new_id("fc"),
        "type": "function_call",
        "status": status,
        "call_id": call["id"],
        "name": call["function"]["name"],
        "arguments": call["function"]["arguments"] if status == "completed" else "",
    }


def usage(input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached_tokens},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def response_object(
    response_id: str,
    body: dict[str, Any],
    model: str,
    *,
    status: str,
    output: list[dict[str, Any]],
    usage_obj: dict[str, Any] | None,
    finish_reason: str | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    incomplete = {"reason": "max_output_tokens"} if status == "incomplete" and finish_reason == "length" else None
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "error": error,
        "incomplete_details": incomplete,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": model,
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0),
        "truncation": "disabled",
        "usage": usage_obj,
        "metadata": body.get("metadata") or {},
    }


def assistant_message(text: str | None, calls: list[dict[str, Any]]) -> dict[str, Any]:
    """The produced turn as a chat message (what the store keeps for the next turn)."""
    msg: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
    if calls:
        msg["tool_calls"] = calls
    return msg
