"""Request bodies -> checked values: SamplingParams, prompts, messages, constraints.

Every bad value becomes InvalidRequestError naming the parameter (OpenAI-style 400). Pure, no awaits.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

from modelc.errors import InvalidRequestError
from modelc.request import Constraint, SamplingParams
from modelc.server.bounds import BOUNDS, MAX_STOP, MAX_STOP_CHARS, bounded_float, bounded_int
from modelc.server.state import GenerationDefaults

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def bad(param: str, why: str) -> InvalidRequestError:
    return InvalidRequestError(f"'{param}' {why}", param=param)


def require_object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise InvalidRequestError("request body must be a JSON object")
    return body


def get_bool(body: dict, name: str, default: bool = False) -> bool:
    v = body.get(name)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise bad(name, f"must be a boolean, got {json.dumps(v)[:40]}")
    return v


def get_int(body: dict, name: str, default: int | None, lo: int | None = None, hi: int | None = None) -> int | None:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int | float) or (isinstance(v, float) and not v.is_integer()):
        raise bad(name, f"must be an integer, got {json.dumps(v)[:40]}")
    v = int(v)
    if lo is not None and v < lo:
        raise bad(name, f"must be >= {lo}, got {v}")
    if hi is not None and v > hi:
        raise bad(name, f"must be <= {hi}, got {v}")
    return v


def get_float(
    body: dict, name: str, default: float | None, lo: float | None = None, hi: float | None = None
) -> float | None:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise bad(name, f"must be a finite number, got {json.dumps(v)[:40]}")
    v = float(v)
    if lo is not None and v < lo:
        raise bad(name, f"must be >= {lo}, got {v}")
    if hi is not None and v > hi:
        raise bad(name, f"must be <= {hi}, got {v}")
    return v


def get_str(body: dict, name: str, default: str | None = None) -> str | None:
    v = body.get(name)
    if v is None:
        return default
    if not isinstance(v, str):
        raise bad(name, "must be a string")
    return v


def parse_stop(body: dict) -> tuple[str, ...]:
    v = body.get("stop")
    if v is None:
        return ()
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise bad("stop", "must be a string or a list of strings")
    if len(items) > MAX_STOP:
        raise bad("stop", f"may hold at most {MAX_STOP} strings")
    if any(s == "" for s in items):
        raise bad("stop", "must not contain empty strings")
    if any(len(s) > MAX_STOP_CHARS for s in items):
        raise bad("stop", f"strings may be at most {MAX_STOP_CHARS} characters long")
    return tuple(items)


def parse_logit_bias(body: dict, vocab_size: int | None) -> tuple[tuple[int, float], ...]:
    v = body.get("logit_bias")
    if v is None:
        return ()
    if not isinstance(v, dict):
        raise bad("logit_bias", "must be an object mapping token ids to biases")
    out = []
    for k, b in v.items():
        try:
            tid = int(k)
        except (TypeError, ValueError):
            raise bad("logit_bias", f"key {k!r} is not a token id") from None
        if tid < 0 or (vocab_size is not None and tid >= vocab_size):
            raise bad("logit_bias", f"token id {tid} is outside the vocabulary (size {vocab_size})")
        lim = BOUNDS["logit_bias_value"]
        if isinstance(b, bool) or not isinstance(b, int | float) or not lim.lo <= b <= lim.hi:
            raise bad("logit_bias", f"bias for token {tid} must be a number in [{lim.lo:g}, {lim.hi:g}]")
        out.append((tid, float(b)))
    return tuple(sorted(out))


def parse_sampling(
    body: dict, defaults: GenerationDefaults, *, vocab_size: int | None, native: bool = False
) -> SamplingParams:
    """The sampling fields shared by every generation endpoint. `native` = the seed spec's defaults
    (temperature 0, top_p/min_p 0 meaning off)."""
    d = defaults
    max_tokens = bounded_int(body, "max_tokens", d.max_tokens if d.max_tokens is not None else 128)
    max_tokens = bounded_int(body, "max_completion_tokens", max_tokens)  # the newer name wins
    temperature = bounded_float(
        body, "temperature", d.temperature if d.temperature is not None else (0.0 if native else 1.0)
    )
    top_p = bounded_float(body, "top_p", d.top_p if d.top_p is not None else 1.0, "top_p_native" if native else None)
    if native and top_p == 0.0:
        top_p = 1.0  # the seed spec: 0 = disabled
    top_logprobs = 0
    logprobs_field = body.get("logprobs")
    if isinstance(logprobs_field, bool) or logprobs_field is None:
        logprobs = bool(logprobs_field)
        top_logprobs = bounded_int(body, "top_logprobs", 0) or 0
        if top_logprobs and not logprobs:
            raise bad("top_logprobs", "requires 'logprobs': true")
    else:  # legacy completions: logprobs is the number of alternatives
        top_logprobs = bounded_int(body, "logprobs", 0, "logprobs_count") or 0
        logprobs = True
    seed = bounded_int(body, "seed", None)
    top_k = bounded_int(body, "top_k", 0) or 0
    try:
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            top_k=max(top_k, 0),  # -1 (vLLM) and 0 both mean off
            min_p=bounded_float(body, "min_p", d.min_p if d.min_p is not None else 0.0),
            typical_p=bounded_float(body, "typical_p", 1.0) or 1.0,
            repetition_penalty=bounded_float(
                body, "repetition_penalty", d.repetition_penalty if d.repetition_penalty is not None else 1.0
            ),
            presence_penalty=bounded_float(
                body, "presence_penalty", d.presence_penalty if d.presence_penalty is not None else 0.0
            ),
            frequency_penalty=bounded_float(
                body, "frequency_penalty", d.frequency_penalty if d.frequency_penalty is not None else 0.0
            ),
            logit_bias=parse_logit_bias(body, vocab_size),
            seed=seed,
            logprobs=logprobs,
            top_logprobs=top_logprobs,
            stop=parse_stop(body),
            stop_token_ids=parse_token_ids(body, "stop_token_ids", vocab_size),
            ignore_eos=get_bool(body, "ignore_eos"),
            min_tokens=bounded_int(body, "min_tokens", 0) or 0,
            speculative=None if body.get("speculative") is None else get_bool(body, "speculative"),
            gamma=bounded_int(body, "gamma", None),
            # native endpoints generate past the context (llama.cpp's /completion); OpenAI ones stop
            context_shift=get_bool(body, "context_shift") if body.get("context_shift") is not None else native,
            n_keep=bounded_int(body, "n_keep", 0) or 0,
            max_context=bounded_int(body, "max_context", None),
            truncate=get_bool(body, "truncate"),
        )
    except InvalidRequestError as e:
        raise bad(e.param or "request", e.message.split(" ", 1)[1] if e.param else e.message) from None


def token_ids_of(v: Any) -> list[int] | None:
    """v as a list of token ids, or None when it is not one. An integral float (7.0) is an integer,
    as JSON Schema's "integer" says."""
    if not isinstance(v, list):
        return None
    out = []
    for t in v:
        if isinstance(t, bool) or not isinstance(t, int | float):
            return None
        if isinstance(t, float):
            if not t.is_integer():
                return None
            t = int(t)
        out.append(t)
    return out


def parse_token_ids(body: dict, name: str, vocab_size: int | None) -> tuple[int, ...]:
    v = body.get(name)
    if v is None:
        return ()
    ids = token_ids_of(v)
    if ids is None:
        raise bad(name, "must be a list of token ids")
    check_token_ids(ids, name, vocab_size)
    return tuple(ids)


def check_token_ids(ids: list[int], name: str, vocab_size: int | None) -> None:
    for t in ids:
        if t < 0 or (vocab_size is not None and t >= vocab_size):
            raise bad(name, f"token id {t} is outside the vocabulary (size {vocab_size})")


def parse_n(body: dict, *, stream: bool, allow_best_of: bool) -> tuple[int, int]:
    n = bounded_int(body, "n", 1)
    best_of = bounded_int(body, "best_of", n) if allow_best_of else n
    if best_of < n:
        raise bad("best_of", f"must be >= n ({n}), got {best_of}")
    if stream and best_of > n:
        raise bad("best_of", "cannot be used with stream (choices are ranked after they finish)")
    return n, best_of


def check_openai_max_tokens(body: dict) -> None:
    """OpenAI and vLLM answer 400 to max_tokens or max_completion_tokens below 1 (other APIs keep their own
    meaning of 0: llama-server's n_predict, Ollama's num_predict)."""
    for name in ("max_tokens", "max_completion_tokens"):
        bounded_int(body, name, None, "openai_max_tokens")


def parse_stream_options(body: dict, stream: bool) -> bool:
    v = body.get("stream_options")
    if v is None:
        return False
    if not isinstance(v, dict):
        raise bad("stream_options", "must be an object")
    if not stream:
        raise bad("stream_options", "is only allowed when 'stream' is true")
    return get_bool(v, "include_usage")


def parse_constraint(body: dict) -> Constraint | None:
    """response_format {text | json_object | json_schema}, `grammar` (a regex string or
    {"type": "regex"|"lark"|"gbnf", "grammar": ...}), and the native `json_schema` object."""
    found: list[Constraint] = []
    rf = body.get("response_format")
    if rf is not None:
        if not isinstance(rf, dict) or not isinstance(rf.get("type"), str):
            raise bad("response_format", "must be an object with a 'type'")
        kind = rf["type"]
        if kind == "json_object":
            found.append(Constraint("json_object"))
        elif kind == "json_schema":
            js = rf.get("json_schema")
            if not isinstance(js, dict) or not isinstance(js.get("schema", {}), dict):
                raise bad("response_format", "json_schema must be an object with a 'schema' object")
            found.append(Constraint("json_schema", json.dumps(js.get("schema", {}))))
        elif kind != "text":
            raise bad("response_format", f"type must be text, json_object or json_schema, got {kind!r}")
    g = body.get("grammar")
    if g is not None:
        if isinstance(g, str):
            found.append(Constraint("regex", g))
        elif (
            isinstance(g, dict)
            and g.get("type") in ("regex", "lark", "gbnf")
            and isinstance(g.get("grammar", g.get("value")), str)
        ):
            found.append(Constraint(g["type"], g.get("grammar", g.get("value"))))
        else:
            raise bad("grammar", "must be a regex string or {'type': 'regex'|'lark'|'gbnf', 'grammar': '...'}")
    js = body.get("json_schema")
    if js is not None:
        if not isinstance(js, dict):
            raise bad("json_schema", "must be a JSON schema object")
        found.append(Constraint("json_schema", json.dumps(js)))
    if len(found) > 1:
        raise bad("grammar", "use only one of response_format (json), grammar and json_schema")
    return found[0] if found else None


def with_constraint(params: SamplingParams, constraint: Constraint | None) -> SamplingParams:
    return params if constraint is None else replace(params, constraint=constraint)


def parse_prompts(body: dict, name: str = "prompt") -> list[str | list[int]]:
    """A string, a list of strings, a list of token ids, or a list of token-id lists."""
    v = body.get(name)
    if v is None:
        raise bad(name, "is required")
    if isinstance(v, str):
        return [v]
    if not isinstance(v, list) or not v:
        raise bad(name, "must be a string, a list of strings, or token ids")
    ids = token_ids_of(v)
    if ids is not None:
        return [ids]
    out: list[str | list[int]] = []
    for item in v:
        ids = token_ids_of(item)
        if isinstance(item, str):
            out.append(item)
        elif ids:
            out.append(ids)
        else:
            raise bad(name, "must be a string, a list of strings, or token ids")
    return out


def content_text(content: Any, where: str) -> str | None:
    """A message's content as text: a string, a list of {type: text} parts, or None."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if not isinstance(p, dict) or p.get("type") not in ("text", "input_text"):
                kind = p.get("type") if isinstance(p, dict) else type(p).__name__
                raise bad(where, f"content part of type {kind!r} is not supported (text only)")
            if not isinstance(p.get("text"), str):
                raise bad(where, "text content parts need a 'text' string")
            parts.append(p["text"])
        return "".join(parts)
    raise bad(where, "content must be a string or a list of text parts")


def parse_messages(body: dict) -> list[dict[str, Any]]:
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise bad("messages", "must be a non-empty list of messages")
    out = []
    for i, m in enumerate(msgs):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise bad(where, "must be an object with 'role' and 'content'")
        role = m.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise bad(f"{where}.role", f"must be one of {sorted(ROLES)}, got {json.dumps(role)[:40]}")
        msg = dict(m)
        msg["content"] = content_text(m.get("content"), f"{where}.content")
        if msg["content"] is None and not (role == "assistant" and m.get("tool_calls")):
            raise bad(f"{where}.content", "is required")
        if role == "developer":
            msg["role"] = "system"
        out.append(msg)
    return out


def parse_tools(body: dict) -> tuple[list[dict[str, Any]] | None, Any]:
    """tools (OpenAI function list) and tool_choice: 'auto' | 'none' | 'required' | {type, function{name}}."""
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if tools is None:
        if choice not in (None, "none", "auto"):
            raise bad("tool_choice", "needs 'tools'")
        return None, "none"
    if not isinstance(tools, list) or not tools:
        raise bad("tools", "must be a non-empty list")
    names = set()
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type", "function") != "function" or not isinstance(fn, dict):
            raise bad(f"tools[{i}]", "must be {'type': 'function', 'function': {'name': ..., 'parameters': ...}}")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise bad(f"tools[{i}].function.name", "is required")
        if "parameters" in fn and not isinstance(fn["parameters"], dict):
            raise bad(f"tools[{i}].function.parameters", "must be a JSON schema object")
        names.add(fn["name"])
    if choice is None:
        choice = "auto"
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            raise bad("tool_choice", f"must be auto, none, required or a named function, got {choice!r}")
    elif isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name") if isinstance(choice.get("function"), dict) else None
        if choice.get("type") != "function" or not isinstance(name, str):
            raise bad("tool_choice", "a named choice is {'type': 'function', 'function': {'name': ...}}")
        if name not in names:
            raise bad("tool_choice", f"names a function that is not in 'tools': {name!r}")
    else:
        raise bad("tool_choice", "must be a string or an object")
    return tools, choice
