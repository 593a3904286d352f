"""Context shift and prompt truncation rules (llama.cpp's, on whole KV blocks). Pure arithmetic, no state.

NOTE: the shift. A sequence whose context reaches its limit keeps its first `keep` tokens (n_keep,
--anchor-tokens, and always the first block, which holds BOS), drops the oldest half of the rest,
and goes on. Both amounts are whole blocks, so the block table just loses `drop` blocks after the
kept ones and the blocks behind them move down by drop * Z positions with their rows' offsets
unchanged: the engine re-rotates their keys by -drop * Z (RoPE composes) and nothing else moves.
"""

from __future__ import annotations

from modelc.errors import InvalidRequestError


def context_limit(max_model_len: int | None, max_context: int | None, capacity: int) -> int:
    """The most tokens one sequence's context may hold: the model's, the request's and the pool's."""
    limit = capacity
    for v in (max_model_len, max_context):
        if v is not None:
            limit = min(limit, v)
    return limit


def resolve_keep(n_keep: int, anchor_tokens: int, num_prompt_tokens: int) -> int:
    """Tokens to keep at the start: n_keep (-1 = the whole prompt) or the server's anchor tokens."""
    return max(num_prompt_tokens if n_keep < 0 else n_keep, anchor_tokens)


def plan_shift(num_tokens: int, num_computed: int, keep: int, block_size: int) -> tuple[int, int] | None:
    """(kept blocks, dropped blocks) for a context of num_tokens, or None when nothing can be dropped
    (the kept part fills the context). Dropped blocks are computed ones, never the pending token's."""
    kb = max(1, -(-keep // block_size))  # the first block always stays (BOS, attention sinks)
    n_left = num_tokens - kb * block_size
    db = (n_left // 2) // block_size  # llama.cpp drops half of what is not kept
    if db < 1 or (kb + db) * block_size > num_computed:
        return None
    return kb, db


def truncate_prompt(tokens: list[int], limit: int, keep: int) -> list[int]:
    """llama.cpp's prompt truncation: keep the first `keep` tokens, erase whole blocks of (limit - keep) / 2
    tokens after them until the prompt fits; a 400 when the kept part alone does not fit."""
    n = len(tokens)
    if n < limit:
        return tokens
    block = (limit - keep) // 2
    if keep >= limit or block < 1:
        raise InvalidRequestError(
            f"the prompt has {n} tokens and n_keep {keep} leaves no room in the context of {limit}", param="n_keep"
        )
    erased = (n - keep - block) // block
    return tokens[:keep] + tokens[keep + erased * block :]
