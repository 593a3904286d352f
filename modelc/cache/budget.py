"""The KV budget arithmetic: MiB, tokens or free memory -> the number of 16-token KV blocks.

No I/O except reading /proc/meminfo and the memory cgroup's files for the default budget (modelc.memory).
"""

from __future__ import annotations

from typing import Any

from modelc import memory
from modelc.cache.kv_pages import KVPages
from modelc.config import KV_AUTO, CacheConfig

DEFAULT_KV_CAP_BYTES = 2 << 30  # the default budget never exceeds 2 GiB...
DEFAULT_KV_FRACTION = 0.25  # ...nor 25% of MemAvailable
DEFAULT_MIN_KV_TOKENS = 4096  # the default cache holds at least this many tokens (all sequences together)


def kv_bytes_per_block(model_config: dict[str, Any], block_size: int = 16, kv_dtype: str = "float32") -> int:
    """Bytes of K and V for one block across all layers (2 * L * K * Z * bytes per row, see KVPages).
    "auto" (not resolved against a model yet: config.resolve_kv_dtype) counts as float32, its upper bound."""
    if kv_dtype == KV_AUTO:
        kv_dtype = "float32"
    num_layers = int(model_config.get("num_hidden_layers") or 0)
    num_heads = int(model_config.get("num_attention_heads") or 1)
    num_kv_heads = int(model_config.get("num_key_value_heads") or num_heads)
    head_dim = model_config.get("head_dim") or int(model_config.get("hidden_size") or 0) // num_heads
    per_block = KVPages.bytes_per_block(num_layers, num_kv_heads, int(head_dim), kv_dtype) * block_size / 16
    return max(1, int(per_block))


def mem_available_bytes() -> int | None:
    """What this process may still fill: MemAvailable, or less under a memory cgroup's limit (modelc.memory)."""
    return memory.available_bytes()


def num_kv_blocks(
    cache: CacheConfig,
    model_config: dict[str, Any],
    *,
    available_bytes: int | None = None,
    max_useful_tokens: int | None = None,
) -> int:
    """KV blocks for all engines from the budget: tokens, MiB, or min(25% of MemAvailable, 2 GiB).
    The automatic budget is also capped at `max_useful_tokens` (max_num_seqs x context length):
    more KV than every sequence at full length could hold is memory nobody can use."""
    if cache.kv_cache_tokens is not None:
        return max(1, -(-cache.kv_cache_tokens // cache.block_size))
    per_block = kv_bytes_per_block(model_config, cache.block_size, cache.kv_dtype)
    if cache.kv_cache_mb is not None:
        budget = int(cache.kv_cache_mb * (1 << 20))
    else:
        budget = default_budget_bytes(available_bytes)
        if max_useful_tokens:
            budget = min(budget, -(-max_useful_tokens // cache.block_size) * per_block)
    return max(1, budget // per_block)


def default_budget_bytes(available_bytes: int | None = None) -> int:
    """The memory the KV cache may take by default: min(25% of MemAvailable, 2 GiB); under a memory cgroup, of the
    group's headroom where that is less."""
    avail = available_bytes if available_bytes is not None else mem_available_bytes()
    return DEFAULT_KV_CAP_BYTES if avail is None else min(int(avail * DEFAULT_KV_FRACTION), DEFAULT_KV_CAP_BYTES)


def default_context(trained: int | None, ctx_size: int | None, per_block_bytes: int, block_size: int = 16, *,
                    available_bytes: int | None = None) -> tuple[int, int]:  # fmt: skip
    """(context, KV tokens) where neither a MiB nor a token count sizes the KV cache (`modelc run` without
    --kv-cache-mb): the context is --ctx-size, else the model's trained context capped by the default budget
    (default_budget_bytes); the cache holds that context and at least DEFAULT_MIN_KV_TOKENS (shared by the
    sequences), within the budget unless --ctx-size asks for more. llama.cpp's server likewise sizes its KV
    cache by its context (-c) rather than by free memory."""
    budget_tokens = max(block_size, default_budget_bytes(available_bytes) // per_block_bytes * block_size)
    context = ctx_size or (min(trained, budget_tokens) if trained else budget_tokens)
    return context, max(context, min(DEFAULT_MIN_KV_TOKENS, budget_tokens))
