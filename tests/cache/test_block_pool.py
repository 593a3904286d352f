from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from modelc.cache.block_pool import BlockPool


@dataclass
class Seq:
    seq_id: int
    token_ids: list[int]
    adapter: str | None = None
    computed: int = field(default=0)


def admit(pool: BlockPool, seq: Seq) -> int:
    blocks, hit = pool.get_computed_blocks(seq)
    assert pool.allocate(seq, len(seq.token_ids), blocks)
    pool.cache_blocks(seq, len(seq.token_ids))
    return hit


def test_allocate_free_counts() -> None:
    pool = BlockPool(8)
    s = Seq(1, list(range(40)))  # 3 blocks
    assert admit(pool, s) == 0
    assert pool.num_used_blocks == 3 and pool.num_free_blocks == 5
    assert pool.append(s, 48) and pool.num_used_blocks == 3
    assert pool.append(s, 49) and pool.num_used_blocks == 4
    pool.check()
    pool.free(1)
    assert pool.num_used_blocks == 0
    pool.check()


def test_allocate_fails_without_change_when_short() -> None:
    pool = BlockPool(2)
    s = Seq(1, list(range(40)))
    assert not pool.allocate(s, 40)
    assert pool.num_free_blocks == 2 and pool.block_table(1) == []
    pool.check()


def test_prefix_hit_shares_blocks_and_leaves_last_token() -> None:
    pool = BlockPool(16)
    a = Seq(1, list(range(50)))  # 3 full blocks + 2
    admit(pool, a)
    b = Seq(2, list(range(48)) + [999, 998])
    blocks, hit = pool.get_computed_blocks(b)
    assert hit == 48 and blocks == pool.block_table(1)[:3]
    assert pool.allocate(b, 50, blocks)
    assert all(pool.ref_count(x) == 2 for x in blocks)
    # exactly 48 tokens: the last block cannot be a hit, its last token must be recomputed
    c = Seq(3, list(range(48)))
    assert pool.get_computed_blocks(c)[1] == 32
    pool.check()
    stats = pool.stats()
    assert stats.prefix_queries == 100 and stats.prefix_hits == 48


def test_adapter_and_parent_are_part_of_the_key() -> None:
    pool = BlockPool(16)
    admit(pool, Seq(1, list(range(40))))
    assert pool.get_computed_blocks(Seq(2, list(range(40)), adapter="x"))[1] == 0
    # same second block, different first block: no hit on the second
    assert pool.get_computed_blocks(Seq(3, [7] * 16 + list(range(16, 40))))[1] == 0


def test_freed_cached_blocks_still_hit_then_get_evicted() -> None:
    pool = BlockPool(4)
    admit(pool, Seq(1, list(range(33))))  # 3 blocks, 2 cached
    pool.free(1)
    assert pool.stats().num_cached_blocks == 2
    assert pool.get_computed_blocks(Seq(2, list(range(33))))[1] == 32
    # an uncached free block is reused before the cached ones
    admit(pool, Seq(3, [5] * 10))
    assert pool.stats().num_cached_blocks == 2
    # allocating everything evicts the LRU cached blocks
    admit(pool, Seq(4, [6] * 40))
    assert pool.stats().num_cached_blocks == 2  # seq 4's own two full blocks
    assert pool.get_computed_blocks(Seq(5, list(range(33))))[1] == 0
    pool.check()


def test_reset_prefix_cache_stops_registration_of_live_sequences() -> None:
    pool = BlockPool(8)
    a = Seq(1, list(range(20)))
    admit(pool, a)
    pool.reset_prefix_cache()
    a.token_ids += list(range(20, 40))
    assert pool.append(a, 40)
    pool.cache_blocks(a, 40)
    assert pool.stats().num_cached_blocks == 0
    pool.check()


def test_disabled_prefix_caching() -> None:
    pool = BlockPool(8, enable_prefix_caching=False)
    admit(pool, Seq(1, list(range(40))))
    assert pool.get_computed_blocks(Seq(2, list(range(40)))) == ([], 0)


def test_bad_sizes() -> None:
    with pytest.raises(ValueError):
        BlockPool(0)


# -- property tests: random allocate / grow / free / reset against the invariants --------------

op = st.one_of(
    st.tuples(st.just("add"), st.integers(1, 70), st.integers(0, 3)),
    st.tuples(st.just("grow"), st.integers(0, 30), st.integers(1, 20)),
    st.tuples(st.just("free"), st.integers(0, 30), st.just(0)),
    st.tuples(st.just("reset"), st.just(0), st.just(0)),
)


@settings(max_examples=150, deadline=None)
@given(num_blocks=st.integers(1, 12), ops=st.lists(op, max_size=60))
def test_accounting_properties(num_blocks: int, ops: list[tuple[str, int, int]]) -> None:
    pool = BlockPool(num_blocks)
    live: dict[int, Seq] = {}
    next_id = 0
    for kind, a, b in ops:
        if kind == "add":
            # prompts share prefixes: family b, length a
            seq = Seq(next_id, [b * 1000 + i for i in range(a)])
            next_id += 1
            blocks, hit = pool.get_computed_blocks(seq)
            assert hit % 16 == 0 and hit < len(seq.token_ids)
            if pool.allocate(seq, len(seq.token_ids), blocks):
                pool.cache_blocks(seq, len(seq.token_ids))
                live[seq.seq_id] = seq
        elif kind == "grow" and live:
            seq = live[sorted(live)[a % len(live)]]
            new_len = len(seq.token_ids) + b
            if pool.append(seq, new_len):
                seq.token_ids += [7] * b
                pool.cache_blocks(seq, new_len)
        elif kind == "free" and live:
            pool.free(live.pop(sorted(live)[a % len(live)]).seq_id)
        elif kind == "reset":
            pool.reset_prefix_cache()
        pool.check()  # free + used == total, ref counts >= 0 and equal to the table counts
        assert pool.num_free_blocks + pool.num_used_blocks == num_blocks
        for seq in live.values():  # every live sequence holds blocks for all its tokens
            assert pool.has_blocks(seq.seq_id, len(seq.token_ids))
            assert all(pool.ref_count(x) > 0 for x in pool.block_table(seq.seq_id))
    for seq_id in list(live):
        pool.free(seq_id)
    assert pool.num_used_blocks == 0
    pool.check()
