"""ChatTemplate: render a model's Jinja chat template with minijinja exactly as transformers' apply_chat_template does.

Owns the template environment (raise_exception, transformers' tojson, strftime_now, Python
string methods, loop controls), message normalization, and the fallback formats for models
without a template. No tokenization here: render() returns text.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import minijinja

from modelc.errors import InvalidRequestError, ModelcError
from modelc.tokenizer import template_budget, template_worker

# Used when a model ships no template and its vocabulary knows ChatML's markers.
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# Used when a model ships no template and has no ChatML markers: "role: content" lines.
PLAIN_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- message.role + ': ' + message.content + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- 'assistant:' }}{%- endif %}"
)


# A template that loops over a message's content parts (multimodal-style templates) gets lists.
_LOOPS_OVER_CONTENT = re.compile(r"for\s+\w+\s+in\s+\w+\s*(?:\.content\b|\[\s*['\"]content['\"]\s*\])")


class TemplateError(InvalidRequestError):
    """The chat template refused the conversation (raise_exception) or failed to render."""


def tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators=None, sort_keys: bool = False):
    """transformers' tojson: plain json.dumps (no HTML escaping), with its keyword options."""
    if isinstance(separators, list):
        separators = tuple(separators)
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message: str) -> None:
    raise TemplateError(f"chat template error: {message}")


def strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment() -> minijinja.Environment:
    env = minijinja.Environment(trim_blocks=True, lstrip_blocks=True, pycompat=True, undefined_behavior="lenient")
    env.add_filter("tojson", tojson)
    env.add_global("raise_exception", raise_exception)
    env.add_global("strftime_now", strftime_now)
    return env


def normalize_messages(messages: Sequence[Mapping[str, Any]], *, flatten: bool = True) -> list[dict[str, Any]]:
    """OpenAI chat messages -> what chat templates expect.

    - content given as a list of {"type": "text", "text": ...} parts becomes one string
      (parts joined with "\\n", as vLLM does) unless `flatten` is False (templates that loop
      over content parts get the checked list); None content becomes "".
    - tool_calls[i].function.arguments given as a JSON string becomes a dict (templates
      print it with tojson); keys absent from a message stay absent (templates test
      `is defined`).
    """
    out: list[dict[str, Any]] = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, Mapping) or not isinstance(msg.get("role"), str):
            raise InvalidRequestError(f"messages[{i}] must be an object with a string 'role'", param="messages")
        m = dict(msg)
        content = _flatten_content(m.get("content"), i)
        if not flatten and isinstance(m.get("content"), list):
            content = [{"type": "text", "text": p} if isinstance(p, str) else dict(p) for p in m["content"]]
        m["content"] = content
        if m.get("tool_calls"):
            m["tool_calls"] = [_normalize_call(c) for c in m["tool_calls"]]
        elif "tool_calls" in m:
            del m["tool_calls"]
        out.append(m)
    return out


def _flatten_content(content: Any, i: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif isinstance(part, str):
                texts.append(part)
            else:
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise InvalidRequestError(f"messages[{i}]: content part of type {kind!r} is not supported (text only)")
        return "\n".join(texts)
    raise InvalidRequestError(f"messages[{i}].content must be a string or a list of text parts", param="messages")


def _normalize_call(call: Any) -> Any:
    if not isinstance(call, Mapping):
        return call
    call = dict(call)
    fn = call.get("function")
    if isinstance(fn, Mapping) and isinstance(fn.get("arguments"), str):
        fn = dict(fn)
        try:
            args = json.loads(fn["arguments"])
        except ValueError:
            args = None
        if isinstance(args, dict):
            fn["arguments"] = args
        call["function"] = fn
    return call


class ChatTemplate:
    """One compiled chat template. render() is thread-safe (minijinja environments are)."""

    def __init__(self, source: str, *, bos_token: str = "", eos_token: str = "", **special: str) -> None:
        self.source = source
        self.bos_token = bos_token or ""
        self.eos_token = eos_token or ""
        self._special = {k: v for k, v in special.items() if isinstance(v, str)}
        self._env = _environment()
        self._lock = threading.Lock()  # the in-process fallback sets fuel on the environment per render
        try:
            self._env.add_template("chat", source)
            names = self._env.undeclared_variables_in_template("chat")
        except minijinja.TemplateError as exc:
            raise TemplateError(f"invalid chat template: {_one_line(exc)}") from exc
        self.takes_tools: bool = "tools" in names
        self.takes_content_lists: bool = bool(_LOOPS_OVER_CONTENT.search(source))

    @classmethod
    def fallback(cls, *, chatml: bool, bos_token: str = "", eos_token: str = "") -> ChatTemplate:
        """The template for a model that ships none: ChatML when the vocabulary has <|im_start|>,
        else `role: content` lines ending with `assistant:`."""
        return cls(CHATML_TEMPLATE if chatml else PLAIN_TEMPLATE, bos_token=bos_token, eos_token=eos_token)

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        **extra: Any,
    ) -> str:
        """The prompt text for `messages` (OpenAI chat format), as transformers would render it."""
        context: dict[str, Any] = {
            **self._special,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            **extra,
            "messages": normalize_messages(messages, flatten=not self.takes_content_lists),
            "tools": list(tools) if tools is not None else None,
            "add_generation_prompt": add_generation_prompt,
        }
        # Rendered in a memory-limited worker process with fuel, an output cap (both growing with the
        # conversation) and a timeout (tokenizer/template_worker.py): a hostile template fails this
        # request with a 400; it can neither hang nor abort the daemon.
        fuel, limit = template_budget.fuel_for(context), template_budget.max_output_chars(context)
        try:
            now = datetime.now().isoformat()
            return template_worker.shared_worker().render(self.source, context, fuel, limit, now)
        except template_worker.RenderFailed as e:
            if e.kind == "raise":  # the template's own raise_exception: its message as is
                raise TemplateError(e.message) from None
            raise TemplateError(f"chat template failed: {e.message}") from None
        except template_worker.WorkerUnavailable:
            return self._render_here(context, fuel, limit)  # no subprocess here: fuel and the output cap only

    def _render_here(self, context: dict[str, Any], fuel: int, limit: int) -> str:
        try:
            with self._lock:
                self._env.fuel = fuel
                text = self._env.render_template("chat", **context)
        except TemplateError:
            raise
        except minijinja.TemplateError as exc:
            cause = exc.__cause__ or exc.__context__
            if isinstance(cause, ModelcError):
                raise TemplateError(cause.message) from exc
            raise TemplateError(f"chat template failed: {_one_line(exc)}") from exc
        if len(text) > limit:
            raise TemplateError(f"chat template failed: it produced {len(text)} characters, more than {limit}")
        return text


def _one_line(exc: Exception) -> str:
    msg = getattr(exc, "message", None) or str(exc)
    return " ".join(str(msg).split())[:300]
