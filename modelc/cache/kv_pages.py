"""KVPages: the engine's physical KV cache, per layer K and V arrays of (P, Z, K, D) pages.

Owned by one Runner; the scheduler's BlockPool does the accounting (which page is whose).
fp16 pages hold IEEE half bit patterns as uint16 (numba has no CPU float16).
"""

from __future__ import annotations

import numpy as np

from modelc.errors import InvalidRequestError

BLOCK_SIZE = 16  # Z: tokens per page; fixed by docs/architecture.md

_STORE = {"float32": np.dtype(np.float32), "float16": np.dtype(np.uint16)}
_ALIASES = {"f32": "float32", "fp32": "float32", "f16": "float16", "fp16": "float16"}


def parse_kv_dtype(name: str) -> str:
    """A user's KV cache type (f32, f16, or the canonical names) -> the canonical name, else a clear error."""
    canon = _ALIASES.get(name.lower(), name.lower())
    if canon not in _STORE:
        raise InvalidRequestError(f"KV cache type must be one of f32, f16, got {name!r}", param="kv_cache_dtype")
    return canon


class KVPages:
    """k, v: (L, P, Z, K, D) arrays; layer l's pages are the C-contiguous views k[l], v[l]."""

    __slots__ = ("num_layers", "num_blocks", "num_kv_heads", "head_dim", "kv_dtype", "k", "v")

    def __init__(self, num_layers: int, num_blocks: int, num_kv_heads: int, head_dim: int, kv_dtype: str = "float32"):
        if kv_dtype not in _STORE:
            raise InvalidRequestError(f"kv_dtype must be one of {sorted(_STORE)}, got {kv_dtype!r}", param="kv_dtype")
        if num_blocks < 1:
            raise InvalidRequestError(f"num_kv_blocks must be >= 1, got {num_blocks}", param="num_kv_blocks")
        self.num_layers = num_layers
        self.num_blocks = num_blocks
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.kv_dtype = kv_dtype
        shape = (num_layers, num_blocks, BLOCK_SIZE, num_kv_heads, head_dim)  # (L, P, Z, K, D)
        self.k = np.zeros(shape, _STORE[kv_dtype])
        self.v = np.zeros(shape, _STORE[kv_dtype])

    @property
    def block_size(self) -> int:
        return BLOCK_SIZE

    @property
    def nbytes(self) -> int:
        return int(self.k.nbytes + self.v.nbytes)

    @staticmethod
    def bytes_per_block(num_layers: int, num_kv_heads: int, head_dim: int, kv_dtype: str = "float32") -> int:
        """Bytes one block costs across all layers, K and V (for sizing the cache from a memory budget)."""
        if kv_dtype not in _STORE:
            raise InvalidRequestError(f"kv_dtype must be one of {sorted(_STORE)}, got {kv_dtype!r}", param="kv_dtype")
        return 2 * num_layers * BLOCK_SIZE * num_kv_heads * head_dim * _STORE[kv_dtype].itemsize

    def layer(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Layer i's (K pages, V pages), each (P, Z, K, D)."""
        return self.k[i], self.v[i]

    def read(self, layer: int, block_table: np.ndarray, num_tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """Debug/test helper: a sequence's first num_tokens K and V rows as float32 (n, K, D) copies."""
        p = np.arange(num_tokens)
        slots = np.asarray(block_table, np.int64)[p // BLOCK_SIZE]
        k = self.k[layer][slots, p % BLOCK_SIZE]
        v = self.v[layer][slots, p % BLOCK_SIZE]
        if self.kv_dtype == "float16":
            return k.view(np.float16).astype(np.float32), v.view(np.float16).astype(np.float32)
        return k.copy(), v.copy()
