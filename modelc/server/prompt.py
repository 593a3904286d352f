"""Requests -> prompt token ids: chat templates (with tools), plain prompts, fill-in-the-middle.

Pure: no awaits. Tool prompts come from the chat template when it takes `tools`, else from
modelc.server.tools.render_tools_system_prompt as a system message.
"""

from __future__ import annotations

from typing import Any

from modelc.errors import InvalidRequestError, ModelcError
from modelc.server import tools as tool_calls
from modelc.server.context import char_budget, check_ids, encode_bounded, too_long
from modelc.server.fim import find_fim_tokens, infill_ids
from modelc.server.schema import bad, check_token_ids
from modelc.server.served import ServedModel, ServedTemplate
from modelc.tokenizer.reasoning import reasoning_syntax


def template_takes_tools(template: ServedTemplate | None) -> bool:
    """The template reads `tools` (ChatTemplate.takes_tools)."""
    return template is not None and template.takes_tools


def fallback_render(messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
    """The seed spec's format for models without a chat template: `role: content` lines."""
    lines = [f"{m['role']}: {m.get('content') or ''}\n" for m in messages]
    if add_generation_prompt:
        lines.append("assistant:")
    return "".join(lines)


def check_chat_size(engine: ServedModel, messages: list[dict[str, Any]], limit: int | None) -> None:
    """A chat whose text alone is far beyond `limit` tokens is a 400 before any template renders it."""
    tok = engine.tokenizer
    if limit is None or tok is None:
        return
    num_chars = sum(len(m["content"]) for m in messages if isinstance(m.get("content"), str))
    if num_chars > char_budget(tok, limit):
        raise too_long("messages", f"{num_chars} characters of content", limit)


def render_chat(
    engine: ServedModel,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    template_kwargs: dict[str, Any] | None = None,
) -> str:
    template = engine.chat_template
    kwargs = dict(template_kwargs or {})
    for key in ("messages", "tools"):  # the request's own fields: a second value made render() raise TypeError
        if key in kwargs:
            raise InvalidRequestError(
                f"'chat_template_kwargs' must not set {key!r} (send it as the request's {key!r})",
                param="chat_template_kwargs",
            )
    add_generation_prompt = kwargs.pop("add_generation_prompt", True)  # vLLM lets the kwargs turn it off
    if not isinstance(add_generation_prompt, bool):
        raise InvalidRequestError(
            "'chat_template_kwargs.add_generation_prompt' must be a boolean", param="chat_template_kwargs"
        )
    if tools and not template_takes_tools(template):
        system = tool_calls.render_tools_system_prompt(tools)
        if messages[0]["role"] == "system":
            messages = [{**messages[0], "content": f"{messages[0]['content']}\n\n{system}"}, *messages[1:]]
        else:
            messages = [{"role": "system", "content": system}, *messages]
        tools = None
    if template is None:
        return fallback_render(messages)
    try:
        return template.render(messages, tools=tools, add_generation_prompt=add_generation_prompt, **kwargs)
    except ModelcError as e:  # already one line saying what failed ("chat template failed: ...")
        raise InvalidRequestError(e.message, param="messages") from None
    except Exception as e:  # a template error on these messages is the request's problem, not a crash
        why = " ".join(str(e).split())[:300]
        raise InvalidRequestError(f"chat template failed: {type(e).__name__}: {why}", param="messages") from None


def model_reasoning_syntax(engine: ServedModel) -> Any:
    """The reasoning syntax (modelc.tokenizer.reasoning) the model's chat template or vocabulary shows, or None."""
    template = engine.chat_template
    tok = engine.tokenizer
    vocab = [t for t in ("</think>",) if tok is not None and tok.token_to_id(t) is not None]
    return reasoning_syntax(template.source if template is not None else None, vocab)


def encode_chat(tokenizer: Any, text: str, bos_token: str | None, limit: int | None = None) -> list[int]:
    """Encode a rendered chat; templates usually write BOS themselves, so do not add a second one.
    A chat that cannot fit `limit` tokens is a 400 (decided before tokenizing when it is far too long)."""
    add_special = not (bos_token and text.startswith(bos_token))
    return encode_bounded(tokenizer, text, add_special=add_special, limit=limit, param="messages")


def encode_prompt(
    tokenizer: Any,
    prompt: str | list[int],
    vocab_size: int | None,
    param: str = "prompt",
    *,
    limit: int | None = None,
    truncate: bool = False,
) -> list[int]:
    """Token ids of a text or token-id prompt, checked against the vocabulary and `limit` (the context
    length: 400 beyond it, or cut to it when `truncate`)."""
    if isinstance(prompt, list):
        check_token_ids(prompt, param, vocab_size)
        return check_ids(prompt, limit=limit, param=param, truncate=truncate)
    return encode_bounded(tokenizer, prompt, add_special=True, limit=limit, param=param, truncate=truncate)


def fim_prompt_ids(tokenizer: Any, prompt: str, suffix: str, limit: int | None = None) -> list[int]:
    """`prefix + suffix -> middle` for models whose vocabulary has FIM tokens (modelc.server.fim); else a clear 400.
    Within `limit` tokens (the context length) or a 400."""
    fim = find_fim_tokens(tokenizer)
    if fim is None:
        raise bad("suffix", "is not supported by this model (its vocabulary has no fill-in-the-middle tokens)")
    if limit is not None and len(prompt) + len(suffix) > char_budget(tokenizer, limit):
        raise too_long("prompt", f"{len(prompt) + len(suffix)} characters with the suffix", limit)
    return check_ids(infill_ids(tokenizer, fim, prompt, suffix), limit=limit, param="prompt")


def tool_constraint(tools: list[dict[str, Any]], tool_choice: Any, *, parallel: bool = False) -> Any:
    """required/named -> a constraint to one valid call (a JSON array of calls when `parallel`)."""
    return tool_calls.tool_constraint(tools, tool_choice, parallel=parallel)


def parse_tool_calls(text: str, tools: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    return tool_calls.parse_tool_calls(text, tools)
