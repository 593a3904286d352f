"""BlockPool: one engine's KV-block accounting: free list, ref counts, block tables, prefix index.

Pure Python, synchronous, owned by the scheduler. The physical K/V pages live in the engine
(cache/kv_pages.py); this module only decides which block ids hold which tokens.

NOTE: prefix caching. A full block's key is (parent block hash, its 16 token ids, adapter id)
and its hash is hash(key), so equal hashes mean equal prefixes up to collisions, and every hit is
verified by comparing the stored key. A block is registered only after its KV has been computed
(`cache_blocks`, called when a step's result is applied), never at allocation, so a hit can never
point at pages another sequence in the same batch is still writing. Freed blocks that carry a hash
stay in the free list (the LRU) and can still hit; allocation takes the least recently freed block
first and evicts its hash. Blocks without a hash go to the front so they are reused first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass
from typing import Protocol


class CachedSequence(Protocol):
    """What the pool reads from a sequence (modelc.scheduler.sequence.Sequence has it)."""

    seq_id: int
    token_ids: list[int]
    adapter: object  # hashable: an adapter name, or a request's adapter mix (SamplingParams.adapter_key)


def _salted(seq: CachedSequence) -> object:
    """The adapter part of a block key, with the sequence's cache_salt when it has one (blocks computed
    another way, e.g. a long-RoPE model's long prompts, must not serve the other kind)."""
    salt = getattr(seq, "cache_salt", None)
    return seq.adapter if salt is None else (seq.adapter, salt)


@dataclass(slots=True)
class _Block:
    block_id: int
    ref_count: int = 0
    hash: int | None = None
    key: tuple | None = None  # (parent hash | None, token ids tuple, adapter) of a registered block


@dataclass(frozen=True, slots=True)
class BlockPoolStats:
    num_blocks: int
    num_used_blocks: int
    num_cached_blocks: int  # blocks with a registered hash (in use or on the LRU)
    prefix_queries: int  # prompt tokens of admitted sequences
    prefix_hits: int  # of those, tokens served from the prefix cache

    @property
    def usage(self) -> float:
        return self.num_used_blocks / self.num_blocks


def block_key(parent: int | None, token_ids: SequenceABC[int], adapter: object) -> tuple:
    """The prefix-cache key of one full block; its hash chains to the next block's key."""
    return (parent, tuple(token_ids), adapter)


def prefix_hashes(
    token_ids: SequenceABC[int], block_size: int, adapter: object = None, max_blocks: int = 8
) -> list[int]:
    """The chained hashes of the first full blocks of a prompt, as the pool computes them (the
    last token is never cached, so neither is a block ending on it). Used to route by prefix."""
    limit = min(max_blocks, (len(token_ids) - 1) // block_size)
    hashes: list[int] = []
    parent: int | None = None
    for i in range(limit):
        parent = hash(block_key(parent, token_ids[i * block_size : (i + 1) * block_size], adapter))
        hashes.append(parent)
    return hashes


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int = 16, *, enable_prefix_caching: bool = True) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"BlockPool needs num_blocks >= 1 and block_size >= 1, got {num_blocks}, {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self._blocks = [_Block(i) for i in range(num_blocks)]
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))  # front = next to reuse
        self._cached: dict[int, int] = {}  # block hash -> block id
        self._tables: dict[int, list[int]] = {}  # seq id -> block ids
        self._num_hashed: dict[int, int] = {}  # seq id -> leading blocks already chained
        self._last_hash: dict[int, int | None] = {}  # seq id -> hash of its last chained block
        self._uncacheable: set[int] = set()  # live across a reset_prefix_cache()
        self._prefix_queries = 0
        self._prefix_hits = 0

    # -- queries -------------------------------------------------------------------------------

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self._free)

    def block_table(self, seq_id: int) -> list[int]:
        return self._tables.get(seq_id, [])

    def has_blocks(self, seq_id: int, num_tokens: int) -> bool:
        return len(self._tables.get(seq_id, ())) >= _cdiv(num_tokens, self.block_size)

    def ref_count(self, block_id: int) -> int:
        return self._blocks[block_id].ref_count

    def stats(self) -> BlockPoolStats:
        return BlockPoolStats(
            self.num_blocks, self.num_used_blocks, len(self._cached), self._prefix_queries, self._prefix_hits
        )

    def get_computed_blocks(self, seq: CachedSequence) -> tuple[list[int], int]:
        """The longest cached prefix of `seq` as (block ids, tokens); never all of its tokens.

        The last token is always left to compute so the step that ends the prefill has logits.
        """
        if not self.enable_prefix_caching:
            return [], 0
        bs = self.block_size
        limit = (len(seq.token_ids) - 1) // bs
        blocks: list[int] = []
        parent: int | None = None
        for i in range(limit):
            key = block_key(parent, seq.token_ids[i * bs : (i + 1) * bs], _salted(seq))
            h = hash(key)
            block_id = self._cached.get(h)
            if block_id is None or self._blocks[block_id].key != key:
                break
            blocks.append(block_id)
            parent = h
        return blocks, len(blocks) * bs

    # -- changes -------------------------------------------------------------------------------

    def allocate(self, seq: CachedSequence, num_tokens: int, computed_blocks: SequenceABC[int] = ()) -> bool:
        """Give a sequence without blocks a table covering `num_tokens` positions, starting with
        `computed_blocks` (a prefix hit from get_computed_blocks). False, changing nothing, when
        the free list is too short."""
        assert seq.seq_id not in self._tables, f"sequence {seq.seq_id} already holds blocks"
        num_new = _cdiv(num_tokens, self.block_size) - len(computed_blocks)
        assert num_new >= 0, "computed blocks cover more than the tokens to allocate"
        num_free_hits = sum(1 for b in computed_blocks if self._blocks[b].ref_count == 0)
        if num_new + num_free_hits > len(self._free):
            return False
        table: list[int] = []
        for block_id in computed_blocks:
            block = self._blocks[block_id]
            if block.ref_count == 0:
                del self._free[block_id]
            block.ref_count += 1
            table.append(block_id)
        table.extend(self._take_free() for _ in range(num_new))
        self._tables[seq.seq_id] = table
        self._num_hashed[seq.seq_id] = len(computed_blocks)
        self._last_hash[seq.seq_id] = self._blocks[computed_blocks[-1]].hash if computed_blocks else None
        self._prefix_queries += len(seq.token_ids)
        self._prefix_hits += len(computed_blocks) * self.block_size
        return True

    def append(self, seq: CachedSequence, num_tokens: int) -> bool:
        """Grow a sequence's table to cover `num_tokens` positions. False, changing nothing, when
        the free list is too short."""
        table = self._tables[seq.seq_id]
        num_new = _cdiv(num_tokens, self.block_size) - len(table)
        if num_new > len(self._free):
            return False
        table.extend(self._take_free() for _ in range(num_new))
        return True

    def truncate(self, seq_id: int, num_tokens: int) -> None:
        """Shrink a sequence's table to the blocks covering its first `num_tokens` positions
        (speculative rollback). The dropped tail blocks were allocated for drafts and never
        registered (only computed full blocks are), so they go to the front of the free list."""
        table = self._tables[seq_id]
        keep = _cdiv(num_tokens, self.block_size)
        assert keep >= self._num_hashed.get(seq_id, 0), "truncating a registered block"
        while len(table) > keep:
            block = self._blocks[table.pop()]
            block.ref_count -= 1
            assert block.ref_count == 0 and block.hash is None, f"block {block.block_id} is shared or registered"
            self._free[block.block_id] = None
            self._free.move_to_end(block.block_id, last=False)

    def shift(self, seq_id: int, keep: int, drop: int) -> tuple[list[int], list[tuple[int, int]]] | None:
        """Context shift: remove blocks [keep, keep + drop) from a table; the blocks behind them move down.
        Moved blocks get rotated keys, so they leave the prefix index (their old hash no longer describes
        them) and the sequence registers nothing more; a moved block another sequence shares is copied
        first (copy-on-write). Returns (the moved blocks' new ids, (src, dst) copies), or None, changing
        nothing, when the copies do not fit in the free list."""
        table = self._tables[seq_id]
        dropped, moved = table[keep : keep + drop], table[keep + drop :]
        shared = sum(1 for b in moved if self._blocks[b].ref_count > 1)
        if shared > len(self._free) + sum(1 for b in dropped if self._blocks[b].ref_count == 1):
            return None
        for block_id in reversed(dropped):
            block = self._blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self._free[block_id] = None
                if block.hash is None:
                    self._free.move_to_end(block_id, last=False)
        new_ids: list[int] = []
        copies: list[tuple[int, int]] = []
        for block_id in moved:
            block = self._blocks[block_id]
            if block.ref_count > 1:
                block.ref_count -= 1
                dst = self._take_free()
                copies.append((block_id, dst))
                new_ids.append(dst)
                continue
            if block.hash is not None:
                if self._cached.get(block.hash) == block_id:
                    del self._cached[block.hash]
                block.hash = block.key = None
            new_ids.append(block_id)
        table[keep:] = new_ids
        self._num_hashed[seq_id] = min(self._num_hashed.get(seq_id, 0), keep)
        self._uncacheable.add(seq_id)
        return new_ids, copies

    def cache_blocks(self, seq: CachedSequence, num_computed_tokens: int) -> None:
        """Register the full blocks among the first `num_computed_tokens` (KV now written)."""
        if not self.enable_prefix_caching or seq.seq_id in self._uncacheable:
            return
        bs = self.block_size
        table = self._tables[seq.seq_id]
        start = self._num_hashed[seq.seq_id]
        end = min(num_computed_tokens // bs, len(table))
        parent = self._last_hash[seq.seq_id]
        for i in range(start, end):
            key = block_key(parent, seq.token_ids[i * bs : (i + 1) * bs], _salted(seq))
            h = hash(key)
            block = self._blocks[table[i]]
            if block.hash is None and h not in self._cached:
                block.hash, block.key = h, key
                self._cached[h] = block.block_id
            parent = h
        if end > start:
            self._num_hashed[seq.seq_id] = end
            self._last_hash[seq.seq_id] = parent

    def free(self, seq_id: int) -> None:
        """Drop a sequence's table; blocks whose count reaches 0 go back to the free list."""
        table = self._tables.pop(seq_id, None)
        self._num_hashed.pop(seq_id, None)
        self._last_hash.pop(seq_id, None)
        self._uncacheable.discard(seq_id)
        if table is None:
            return
        # Reversed: a sequence's tail blocks are the least likely to be shared, so evict them first.
        for block_id in reversed(table):
            block = self._blocks[block_id]
            block.ref_count -= 1
            assert block.ref_count >= 0, f"block {block_id} ref count went negative"
            if block.ref_count == 0:
                self._free[block_id] = None
                if block.hash is None:
                    self._free.move_to_end(block_id, last=False)

    def reset_prefix_cache(self) -> None:
        """Forget every registered block (the engine's pages changed meaning: restart, adapter swap)."""
        for block in self._blocks:
            block.hash = block.key = None
        self._cached.clear()
        # Live sequences computed their pages before the reset: never register them again.
        self._uncacheable.update(self._tables)

    def _take_free(self) -> int:
        block_id, _ = self._free.popitem(last=False)
        block = self._blocks[block_id]
        assert block.ref_count == 0
        if block.hash is not None:
            if self._cached.get(block.hash) == block_id:
                del self._cached[block.hash]
            block.hash = block.key = None
        block.ref_count = 1
        return block_id

    def check(self) -> None:
        """Assert the accounting invariants (free + used == total, ref counts match the tables)."""
        refs = [0] * self.num_blocks
        for table in self._tables.values():
            for block_id in table:
                refs[block_id] += 1
        for block in self._blocks:
            assert block.ref_count >= 0, f"block {block.block_id} has a negative ref count"
            assert block.ref_count == refs[block.block_id], f"block {block.block_id} ref count is off"
            assert (block.ref_count == 0) == (block.block_id in self._free), f"block {block.block_id} misfiled"
        assert len(self._free) + sum(1 for r in refs if r) == self.num_blocks
        for h, block_id in self._cached.items():
            assert self._blocks[block_id].hash == h, f"prefix index points block {block_id} at a stale hash"
