"""OpenAI response objects built from ChoiceResults: chat.completion(.chunk), text_completion, logprobs, usage.

Pure functions, no awaits; the shapes follow the OpenAI API reference field for field.
"""

from __future__ import annotations

from typing import Any

from modelc.server.generation import ChoiceResult
from modelc.server.served import ServedTokenizer
from modelc.version import __version__

SYSTEM_FINGERPRINT = f"modelc-{__version__}"


def token_str(tokenizer: ServedTokenizer, token_id: int) -> tuple[str, list[int]]:
    """A token's own text and bytes (a partial UTF-8 byte shows as U+FFFD in the text, exact in bytes)."""
    raw = tokenizer.token_bytes(token_id)
    return raw.decode("utf-8", errors="replace"), list(raw)


def chat_logprob_entries(
    tokenizer: Any, r: ChoiceResult, start: int = 0, stop: int | None = None, num_top: int = 0, with_ids: bool = False
) -> list[dict[str, Any]]:
    """Chat completions' logprobs.content entries; with_ids adds each token's "id" (llama.cpp's
    completion_probabilities are these entries with ids)."""

    def entry(tid: int, lp: float | None) -> dict[str, Any]:
        t, b = token_str(tokenizer, tid)
        return (
            {"id": tid, "token": t, "logprob": lp, "bytes": b} if with_ids else {"token": t, "logprob": lp, "bytes": b}
        )

    out = []
    for i in range(start, len(r.token_ids) if stop is None else stop):
        e = entry(r.token_ids[i], r.logprobs[i])
        e["top_logprobs"] = [entry(tid, lp) for tid, lp in r.top_logprobs[i][:num_top]]
        out.append(e)
    return out


def completion_logprobs(
    tokenizer: Any, r: ChoiceResult, start: int = 0, stop: int | None = None, num_top: int = 0, text_offset0: int = 0
) -> dict[str, Any]:
    """Legacy completions shape: {tokens, token_logprobs, top_logprobs: [{token: lp}], text_offset}."""
    stop = len(r.token_ids) if stop is None else stop
    tokens, lps, tops, offsets = [], [], [], []
    offset = text_offset0 + sum(len(t) for t in r.token_texts[:start])
    for i in range(start, stop):
        tokens.append(token_str(tokenizer, r.token_ids[i])[0])
        lps.append(r.logprobs[i])
        tops.append({token_str(tokenizer, tid)[0]: lp for tid, lp in r.top_logprobs[i][:num_top]} if num_top else None)
        offsets.append(offset)
        offset += len(r.token_texts[i])
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    u: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if cached_tokens:
        u["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return u


def chat_completion(
    rid: str, created: int, model: str, choices: list[dict[str, Any]], usage_obj: dict[str, Any]
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "choices": choices,
        "usage": usage_obj,
    }


def chat_chunk(
    rid: str,
    created: int,
    model: str,
    choices: list[dict[str, Any]],
    include_usage: bool,
    usage_obj: dict[str, Any] | None = None,
) -> dict[str, Any]:
    chunk = {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "choices": choices,
    }
    if include_usage:
        chunk["usage"] = usage_obj
    return chunk


def chunk_choice(
    index: int, delta: dict[str, Any], finish_reason: str | None = None, logprobs: Any = None
) -> dict[str, Any]:
    return {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}


def text_completion(
    rid: str,
    created: int,
    model: str,
    choices: list[dict[str, Any]],
    usage_obj: dict[str, Any] | None,
    include_usage: bool = True,
) -> dict[str, Any]:
    obj = {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "choices": choices,
    }
    if include_usage:
        obj["usage"] = usage_obj
    return obj


def tool_call_deltas(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Streaming shape of finished tool calls: one delta entry per call, with its index."""
    return [
        {
            "index": i,
            "id": c["id"],
            "type": "function",
            "function": {"name": c["function"]["name"], "arguments": c["function"]["arguments"]},
        }
        for i, c in enumerate(calls)
    ]
