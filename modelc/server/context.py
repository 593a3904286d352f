"""The limits every route enforces before doing work: the model's context length (prompts and
embedding inputs, with optional truncation) and the engine's queue (a request with more sequences
than the queue holds can never run: 400, not 503).

Pure and synchronous. Texts far longer than any prompt that could fit are refused (or cut, when
truncating) by their length in characters before the tokenizer sees them, so a 10 MB prompt costs
no tokenizer time at all.
"""

from __future__ import annotations

import weakref
from typing import Any

from modelc.api.engines import EncoderTokenizer
from modelc.errors import InvalidRequestError
from modelc.server.served import ServedModel

# A token covers at most max(longest vocabulary entry, FLOOR) characters; SLACK more is allowed
# for unknown-word tokens ([UNK] may stand for a whole word). Only texts beyond that are cut early.
CHARS_PER_TOKEN_FLOOR = 32
CHARS_SLACK = 4
_token_chars: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def context_length(engine: ServedModel) -> int | None:
    """The most tokens one sequence may hold (prompt + output), or None when the engine has no limit."""
    n = engine.context_length
    return int(n) if isinstance(n, int | float) and n > 0 else None


def prompt_limit(engine: ServedModel, body: dict[str, Any], *, truncate_default: bool = False) -> int | None:
    """The prompt length a generation route refuses beyond (400), or None when the request asks the
    engine to truncate (`truncate`, llama.cpp's rule: the scheduler keeps n_keep and the end)."""
    truncate = body.get("truncate", truncate_default)
    return None if truncate is True else context_length(engine)


def queue_capacity(engine: ServedModel) -> int | None:
    """The most sequences the engine will queue at once (its max_queue), or None when unknown."""
    n = engine.config.scheduler.max_queue if engine.config is not None else 0
    return n if n > 0 else None


def check_num_sequences(engine: ServedModel, num: int) -> None:
    cap = queue_capacity(engine)
    if cap is not None and num > cap:
        raise InvalidRequestError(
            f"the request needs {num} sequences but this server queues at most {cap} at once; send fewer prompts",
            param="prompt",
        )


def max_token_chars(tok: Any) -> int:
    """The longest vocabulary entry in characters (at least CHARS_PER_TOKEN_FLOOR); computed once."""
    try:
        return _token_chars[tok]
    except (KeyError, TypeError):
        pass
    longest = 0
    try:
        longest = max((len(b) for b in tok.all_token_bytes()), default=0)
    except Exception:  # an odd tokenizer: fall back to the floor times the slack
        longest = 0
    n = max(longest, CHARS_PER_TOKEN_FLOOR)
    try:
        _token_chars[tok] = n
    except TypeError:
        pass
    return n


def char_budget(tok: Any, limit: int) -> int:
    """A text longer than this many characters surely has more than `limit` tokens."""
    return (limit + 1) * max_token_chars(tok) * CHARS_SLACK


def too_long(param: str, what: str, limit: int) -> InvalidRequestError:
    return InvalidRequestError(f"'{param}' has {what}; this model's context length is {limit} tokens", param=param)


def encode_bounded(
    tok: Any, text: str, *, add_special: bool, limit: int | None, param: str, truncate: bool = False
) -> list[int]:
    """tok.encode(text) refused (400) when it cannot fit `limit` tokens, or cut to `limit` tokens when
    `truncate`. Run it in a worker thread: tokenizing a long text takes seconds."""
    if limit is not None and len(text) > char_budget(tok, limit):
        if not truncate:
            raise too_long(param, f"{len(text)} characters", limit)
        text = text[: char_budget(tok, limit)]
    if truncate and limit is not None and isinstance(tok, EncoderTokenizer):
        return tok.encode_truncated(text, limit, add_special)  # their own truncation keeps [SEP] at the end
    ids = list(tok.encode(text, add_special=add_special))
    if limit is not None and len(ids) > limit:
        if not truncate:
            raise too_long(param, f"{len(ids)} tokens", limit)
        ids = ids[:limit]
    return ids


def check_ids(ids: list[int], *, limit: int | None, param: str, truncate: bool = False) -> list[int]:
    if limit is not None and len(ids) > limit:
        if not truncate:
            raise too_long(param, f"{len(ids)} tokens", limit)
        return ids[:limit]
    return ids
