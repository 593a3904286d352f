"""Tool calling for chat: the fallback tools prompt, parsing calls out of generated text, tool_choice -> Constraint.

Owns the text formats models use for calls (Hermes/Qwen <tool_call>, Llama 3 JSON with
<|python_tag|>, Mistral [TOOL_CALLS], plain JSON) and OpenAI's tool_call shape. No
templates (modelc.tokenizer.chat_template) and no grammar compiling (constraint.py) here.
"""

from __future__ import annotations

import json
import re
import secrets
import string
from collections.abc import Mapping, Sequence
from typing import Any

from modelc.errors import InvalidRequestError
from modelc.request import Constraint

_ID_ALPHABET = string.ascii_letters + string.digits
_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
# harmony (gpt-oss): a commentary-channel message addressed to=functions.NAME, ended by <|call|>
_HARMONY = re.compile(
    r"(?:<\|start\|>assistant)?([^<]*)<\|channel\|>commentary([^<]*)(?:<\|constrain\|>[^<]*)?<\|message\|>(.*?)"
    r"(?:<\|call\|>|<\|end\|>|$)",
    re.S,
)
_TO_FUNCTION = re.compile(r"to=functions\.([\w.-]+)")
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)
_DECODER = json.JSONDecoder()

TOOLS_PROMPT_HEADER = (
    "You can call functions (tools). To call one, reply with a JSON object inside "
    "<tool_call></tool_call> tags, exactly like this:\n"
    "<tool_call>\n"
    '{"name": "<function name>", "arguments": {<arguments as JSON>}}\n'
    "</tool_call>\n"
    "Make several calls with one block each. Call a tool only when it helps; otherwise answer normally.\n"
    "The available functions, as JSON schemas:\n"
)


def new_call_id() -> str:
    """An OpenAI-style tool call id: "call_" + 24 random letters/digits."""
    return "call_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(24))


def _functions(tools: Sequence[Mapping[str, Any]] | None) -> list[Mapping[str, Any]]:
    """The function objects of an OpenAI tools list ({"type": "function", "function": {...}})."""
    out = []
    for tool in tools or ():
        fn = tool.get("function", tool) if isinstance(tool, Mapping) else None
        if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
            out.append(fn)
    return out


def render_tools_system_prompt(tools: Sequence[Mapping[str, Any]]) -> str:
    """System-prompt text describing `tools`, for chat templates that do not take `tools`.
    Calls written the way it asks are recognised by parse_tool_calls (the <tool_call> form)."""
    lines = [
        json.dumps(
            {"name": fn["name"], "description": fn.get("description", ""), "parameters": fn.get("parameters", {})},
            ensure_ascii=False,
        )
        for fn in _functions(tools)
    ]
    return TOOLS_PROMPT_HEADER + "<tools>\n" + "\n".join(lines) + "\n</tools>"


# ---------------------------------------------------------------- parsing
def parse_tool_calls(text: str, tools: Sequence[Mapping[str, Any]] | None) -> tuple[str, list[dict[str, Any]]]:
    """Split generated `text` into (content, tool_calls in OpenAI's shape).

    Recognised: Hermes/Qwen/SmolLM3 `<tool_call>{...}</tool_call>` blocks (several = parallel calls),
    Granite `<|tool_call|>[{...}, ...]`, gpt-oss harmony `<|channel|>commentary to=functions.NAME
    <|constrain|>json<|message|>{...}<|call|>`,
    Mistral `[TOOL_CALLS] [{...}, ...]` (and `[TOOL_CALLS]name[ARGS]{...}`), Llama 3
    `{"name": ..., "parameters": {...}}` optionally after `<|python_tag|>` (several joined by
    ";"), and plain JSON `{"name", "arguments"}` or a list of them (optionally in a ```json
    fence). A call naming a function that is not in `tools` is not a call: the text stays
    content. With no calls found, returns (text, []).
    """
    names = {fn["name"] for fn in _functions(tools)}
    for parse in (_parse_hermes, _parse_granite, _parse_harmony, _parse_mistral, _parse_json_text):
        found = parse(text, names)
        if found is not None:
            content, calls = found
            return content, [_openai_call(name, args) for name, args in calls]
    return text, []


Call = tuple[str, Any]


def _as_call(obj: Any, names: set[str]) -> Call | None:
    if not isinstance(obj, Mapping):
        return None
    name = obj.get("name")
    if not isinstance(name, str) or (names and name not in names):
        return None
    if "arguments" in obj:
        args = obj["arguments"]
    elif "parameters" in obj:
        args = obj["parameters"]
    else:
        args = {}
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return None
    return (name, args) if isinstance(args, Mapping) else None


def _as_calls(obj: Any, names: set[str]) -> list[Call] | None:
    items = obj if isinstance(obj, list) else [obj]
    calls = [_as_call(item, names) for item in items]
    if not calls or any(c is None for c in calls):
        return None
    return calls  # type: ignore[return-value]


def _parse_hermes(text: str, names: set[str]) -> tuple[str, list[Call]] | None:
    if "<tool_call>" not in text:
        return None
    calls: list[Call] = []
    for m in _HERMES.finditer(text):
        obj = _load_json_prefix(m.group(1))
        found = _as_calls(obj, names) if obj is not None else None
        if found is None:
            return None  # a malformed block: leave the whole text as content
        calls.extend(found)
    content = _HERMES.sub("", text).strip()
    return content, calls


def _parse_granite(text: str, names: set[str]) -> tuple[str, list[Call]] | None:
    head, sep, rest = text.partition("<|tool_call|>")
    if not sep:
        return None
    obj = _load_json_prefix(rest)
    calls = _as_calls(obj, names) if obj is not None else None
    return (head.strip(), calls) if calls else None


def _parse_harmony(text: str, names: set[str]) -> tuple[str, list[Call]] | None:
    if "<|channel|>commentary" not in text or "to=functions." not in text:
        return None
    calls: list[Call] = []
    for m in _HARMONY.finditer(text):
        to = _TO_FUNCTION.search(m.group(1) + m.group(2))
        if to is None:
            continue  # a commentary message to the user, not a call
        call = _as_call({"name": to.group(1), "arguments": _load_json_prefix(m.group(3))}, names)
        if call is None:
            return None
        calls.append(call)
    if not calls:
        return None
    content = _HARMONY.sub(lambda m: "" if _TO_FUNCTION.search(m.group(1) + m.group(2)) else m.group(0), text)
    return content.strip(), calls


def _parse_mistral(text: str, names: set[str]) -> tuple[str, list[Call]] | None:
    head, sep, rest = text.partition("[TOOL_CALLS]")
    if not sep:
        return None
    rest = rest.strip()
    if "[ARGS]" in rest:  # v11 tokenizer form: [TOOL_CALLS]name[ARGS]{...}[TOOL_CALLS]name2[ARGS]{...}
        calls: list[Call] = []
        for part in rest.split("[TOOL_CALLS]"):
            name, _, args_text = part.partition("[ARGS]")
            call = _as_call({"name": name.strip(), "arguments": _load_json_prefix(args_text)}, names)
            if call is None:
                return None
            calls.append(call)
        return head.strip(), calls
    obj = _load_json_prefix(rest)
    calls_or_none = _as_calls(obj, names) if obj is not None else None
    return (head.strip(), calls_or_none) if calls_or_none is not None else None


def _parse_json_text(text: str, names: set[str]) -> tuple[str, list[Call]] | None:
    """Llama 3 (<|python_tag|>, ";"-separated) and plain JSON: the whole reply is the call(s)."""
    body = text.strip()
    head = ""
    if "<|python_tag|>" in body:
        head, _, body = body.partition("<|python_tag|>")
        body = body.strip()
    fence = _FENCE.match(body)
    if fence:
        body = fence.group(1)
    if not body.startswith(("{", "[")):
        return None
    calls: list[Call] = []
    pos = 0
    while pos < len(body):
        try:
            obj, end = _DECODER.raw_decode(body, pos)
        except ValueError:
            return None
        found = _as_calls(obj, names)
        if found is None:
            return None
        calls.extend(found)
        pos = end
        while pos < len(body) and body[pos] in " \t\r\n;":
            pos += 1
    return (head.strip(), calls) if calls else None


def _load_json_prefix(text: str) -> Any:
    """The JSON value at the start of `text` (trailing text ignored), or None."""
    text = text.strip()
    try:
        return _DECODER.raw_decode(text)[0]
    except ValueError:
        return None


def _openai_call(name: str, args: Any) -> dict[str, Any]:
    return {
        "id": new_call_id(),
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
    }


# ---------------------------------------------------------------- tool_choice
def tool_constraint(
    tools: Sequence[Mapping[str, Any]] | None, tool_choice: Any, *, parallel: bool = False
) -> Constraint | None:
    """The decoding constraint `tool_choice` asks for.

    "auto", "none" or absent -> None (free text; parse_tool_calls finds calls afterwards).
    "required" -> a call of any of `tools`; {"type": "function", "function": {"name": N}}
    -> a call of N. With `parallel`, the output is a non-empty JSON array of calls.
    The constrained output is plain JSON {"name", "arguments"}, which parse_tool_calls reads.
    """
    if tool_choice is None or tool_choice in ("auto", "none"):
        return None
    fns = _functions(tools)
    if not fns:
        raise InvalidRequestError("tool_choice needs a non-empty 'tools' list", param="tool_choice")
    if tool_choice == "required":
        chosen = fns
    elif isinstance(tool_choice, Mapping):
        fn = tool_choice.get("function")
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if tool_choice.get("type") != "function" or not isinstance(name, str):
            raise InvalidRequestError(
                'tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}',
                param="tool_choice",
            )
        chosen = [f for f in fns if f["name"] == name]
        if not chosen:
            raise InvalidRequestError(f"tool_choice names {name!r}, which is not in tools", param="tool_choice")
    else:
        raise InvalidRequestError(f"invalid tool_choice {tool_choice!r}", param="tool_choice")
    spec = {"tools": [{"type": "function", "function": dict(f)} for f in chosen], "parallel": parallel}
    return Constraint("tool_call", json.dumps(spec, ensure_ascii=False))
