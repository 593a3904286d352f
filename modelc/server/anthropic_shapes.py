"""The Anthropic Messages API's shapes: a /v1/messages body -> a chat-completions body (so the one chat
pipeline of openai_chat.py serves it), a finished choice -> a `message` object, and errors.

Pure functions, no awaits. Field names follow Anthropic's API reference (docs.anthropic.com).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from modelc.errors import InvalidRequestError, ModelcError
from modelc.server.bounds import BOUNDS, bounded_float, bounded_int
from modelc.server.errors import anthropic_error_body
from modelc.server.schema import bad

# Sampling fields passed through as they are (modelc's extensions, as on chat completions).
EXTENSIONS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "logit_bias",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "ignore_eos",
    "min_tokens",
)
THINKING = {"enabled": True, "adaptive": True, "between_tools": True, "disabled": False}

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "abort": "end_turn"}


def error_body(err: ModelcError) -> dict[str, Any]:
    return anthropic_error_body(err.http_status, err.message)


def new_message_id() -> str:
    return f"msg_{uuid.uuid4().hex[:24]}"


def _text_of(blocks: Any, where: str) -> str:
    """A string, or a list of text blocks (the only kind allowed here), as one string."""
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        raise bad(where, "must be a string or a list of text blocks")
    parts = []
    for i, b in enumerate(blocks):
        if not isinstance(b, dict) or b.get("type") != "text" or not isinstance(b.get("text"), str):
            kind = b.get("type") if isinstance(b, dict) else type(b).__name__
            raise bad(f"{where}[{i}]", f"block of type {kind!r} is not supported here (text only)")
        parts.append(b["text"])
    return "".join(parts)


def _tool_result_text(block: dict[str, Any], where: str) -> str:
    content = block.get("content", "")
    text = _text_of(content, f"{where}.content") if content is not None else ""
    return f"Error: {text}" if block.get("is_error") else text


def _user_messages(content: Any, where: str) -> list[dict[str, Any]]:
    """A user turn: tool_result blocks become `tool` messages (in order), the text a user message."""
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    if not isinstance(content, list) or not content:
        raise bad(where, "must be a string or a non-empty list of content blocks")
    out: list[dict[str, Any]] = []
    text: list[str] = []
    for i, b in enumerate(content):
        w = f"{where}[{i}]"
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text" and isinstance(b.get("text"), str):
            text.append(b["text"])
        elif kind == "tool_result":
            if not isinstance(b.get("tool_use_id"), str):
                raise bad(f"{w}.tool_use_id", "is required")
            out.append({"role": "tool", "tool_call_id": b["tool_use_id"], "content": _tool_result_text(b, w)})
        else:
            raise bad(w, f"block of type {kind!r} is not supported (text and tool_result only)")
    if text:
        out.append({"role": "user", "content": "".join(text)})
    return out


def _assistant_message(content: Any, where: str) -> dict[str, Any]:
    """An assistant turn: text, tool_use blocks (-> tool_calls); thinking blocks are dropped."""
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    if not isinstance(content, list):
        raise bad(where, "must be a string or a list of content blocks")
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    for i, b in enumerate(content):
        w = f"{where}[{i}]"
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text" and isinstance(b.get("text"), str):
            text.append(b["text"])
        elif kind == "tool_use":
            if not isinstance(b.get("name"), str) or not isinstance(b.get("input", {}), dict):
                raise bad(w, "a tool_use block needs a 'name' and an 'input' object")
            call_id = b.get("id") if isinstance(b.get("id"), str) else f"toolu_{uuid.uuid4().hex[:24]}"
            args = json.dumps(b.get("input", {}), ensure_ascii=False)
            calls.append({"id": call_id, "type": "function", "function": {"name": b["name"], "arguments": args}})
        elif kind in ("thinking", "redacted_thinking"):
            continue  # earlier reasoning is not fed back (as chat templates drop reasoning_content)
        else:
            raise bad(w, f"block of type {kind!r} is not supported (text, tool_use and thinking only)")
    msg: dict[str, Any] = {"role": "assistant", "content": "".join(text) if text or not calls else None}
    if calls:
        msg["tool_calls"] = calls
    return msg


def _tools(body: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, Any, bool | None]:
    tools = body.get("tools")
    out = None
    if tools is not None:
        if not isinstance(tools, list):
            raise bad("tools", "must be a list")
        out = []
        for i, t in enumerate(tools):
            if not isinstance(t, dict) or not isinstance(t.get("name"), str):
                raise bad(f"tools[{i}]", "must be {'name': ..., 'input_schema': {...}}")
            if t.get("type") not in (None, "custom"):
                raise bad(f"tools[{i}].type", f"server tool {t.get('type')!r} is not supported (custom tools only)")
            fn = {"name": t["name"], "parameters": t.get("input_schema") or {"type": "object"}}
            if isinstance(t.get("description"), str):
                fn["description"] = t["description"]
            out.append({"type": "function", "function": fn})
        out = out or None
    choice = body.get("tool_choice")
    parallel = None
    if choice is None:
        return out, None, parallel
    if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
        raise bad("tool_choice", "must be {'type': 'auto' | 'any' | 'tool' | 'none'}")
    if choice.get("disable_parallel_tool_use") is True:
        parallel = False
    kind = choice["type"]
    if kind == "tool":
        if not isinstance(choice.get("name"), str):
            raise bad("tool_choice.name", "is required for type 'tool'")
        return out, {"type": "function", "function": {"name": choice["name"]}}, parallel
    return out, {"auto": "auto", "any": "required", "none": "none"}[kind], parallel


def _thinking(body: dict[str, Any], count_only: bool) -> bool | None:
    """`thinking` -> whether the template's thinking is on (None: not sent). `budget_tokens` is checked
    as Anthropic checks it (required for "enabled", >= 1024, below max_tokens); the model then thinks
    until it closes its thought or max_tokens ends the answer (no separate thinking budget is kept)."""
    thinking = body.get("thinking")
    if thinking is None:
        return None
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if not isinstance(kind, str) or kind not in THINKING:
        raise bad("thinking.type", f"must be one of {sorted(THINKING)}")
    budget = thinking.get("budget_tokens")
    if budget is None:
        if kind == "enabled":
            raise bad("thinking.budget_tokens", "is required when thinking is enabled")
        return THINKING[kind]
    budget = int(BOUNDS["budget_tokens"].check("thinking.budget_tokens", budget))
    max_tokens = body.get("max_tokens")
    if not count_only and isinstance(max_tokens, int) and budget >= max_tokens:
        raise bad("thinking.budget_tokens", f"must be less than max_tokens ({max_tokens}), got {budget}")
    return THINKING[kind]


def chat_body(body: dict[str, Any], *, count_only: bool = False) -> dict[str, Any]:
    """A Messages request -> the equivalent chat-completions request body. The fields whose range is
    Anthropic's own (max_tokens >= 1, temperature 0-1, top_k >= 0) are checked against it here."""
    if not count_only and body.get("max_tokens") is None:
        raise bad("max_tokens", "is required")
    bounded_int(body, "max_tokens", None, "anthropic_max_tokens")
    bounded_float(body, "temperature", None, "anthropic_temperature")
    bounded_int(body, "top_k", None, "anthropic_top_k")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise bad("messages", "must be a non-empty list of messages")
    messages: list[dict[str, Any]] = []
    if body.get("system") is not None:
        system = _text_of(body["system"], "system")
        if system:
            messages.append({"role": "system", "content": system})
    for i, m in enumerate(msgs):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            raise bad(f"{where}.role", "must be 'user' or 'assistant'")
        if m["role"] == "user":
            messages.extend(_user_messages(m.get("content"), f"{where}.content"))
        else:
            messages.append(_assistant_message(m.get("content"), f"{where}.content"))
    out: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    for name in ("max_tokens", *EXTENSIONS):
        if body.get(name) is not None:
            out[name] = body[name]
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
            raise bad("stop_sequences", "must be a list of non-empty strings")
        out["stop"] = stops
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise bad("stream", "must be a boolean")
    out["stream"] = bool(stream)
    tools, choice, parallel = _tools(body)
    if tools is not None:
        out["tools"] = tools
        if choice is not None:
            out["tool_choice"] = choice
        if parallel is not None:
            out["parallel_tool_calls"] = parallel
    elif choice not in (None, "auto", "none"):
        raise InvalidRequestError("'tool_choice' needs 'tools'", param="tool_choice")
    thinking = _thinking(body, count_only)
    if thinking is not None:
        out["chat_template_kwargs"] = {"enable_thinking": thinking}
    fmt = (body.get("output_config") or {}).get("format") if isinstance(body.get("output_config"), dict) else None
    if fmt is not None:
        if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
            raise bad("output_config.format", "must be {'type': 'json_schema', 'schema': {...}}")
        out["response_format"] = {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt["schema"]}}
    return out


def usage(input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens - cached_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached_tokens,
    }


def tool_use_block(call: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI-shaped tool call -> a tool_use block (arguments parsed back into an object)."""
    try:
        args = json.loads(call["function"]["arguments"] or "{}")
    except ValueError:
        args = {}
    call_id = call["id"] if str(call["id"]).startswith("toolu_") else f"toolu_{call['id'].removeprefix('call_')}"
    return {"type": "tool_use", "id": call_id, "name": call["function"]["name"], "input": args}


def message(
    message_id: str,
    model: str,
    content: list[dict[str, Any]],
    stop_reason: str | None,
    stop_sequence: str | None,
    usage_obj: dict[str, Any],
) -> dict[str, Any]:
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": usage_obj,
    }


def stop_reason(finish_reason: str | None, stop_sequence: str | None, has_calls: bool) -> str:
    if has_calls:
        return "tool_use"
    if stop_sequence is not None:
        return "stop_sequence"
    return STOP_REASONS.get(finish_reason or "stop", "end_turn")
