"""The router alone: prefix affinity weighed against load, full queues, dead replicas."""

from __future__ import annotations

import pytest

from modelc.cache.block_pool import BlockPool, prefix_hashes
from modelc.config import ReplicaConfig
from modelc.errors import InvalidRequestError
from modelc.replicas.router import ReplicaLoad, Router


def _loads(n: int, cap: int = 4) -> list[ReplicaLoad]:
    return [ReplicaLoad(i, max_in_flight=cap, kv_blocks_total=100) for i in range(n)]


def test_prefix_hashes_are_the_pools_own_chain():
    """The router's hashes are exactly the keys the prefix cache registers."""

    class Seq:
        seq_id, adapter = 1, None
        token_ids = list(range(50))

    pool = BlockPool(8, 16)
    assert pool.allocate(Seq, 50)
    pool.cache_blocks(Seq, 50)
    assert sorted(prefix_hashes(Seq.token_ids, 16)) == sorted(pool._cached)  # 3 full blocks, the last token never
    assert prefix_hashes(list(range(17)), 16) == prefix_hashes(list(range(17)), 16, max_blocks=1)
    assert prefix_hashes(list(range(16)), 16) == []  # a block ending on the last token is not cached
    assert prefix_hashes(list(range(40)), 16, "lora") != prefix_hashes(list(range(40)), 16)


def test_affinity_sends_a_shared_prefix_to_the_replica_that_has_it():
    r, loads = Router("affinity"), _loads(2)
    system = prefix_hashes(list(range(100)), 16)
    first = r.pick(system, loads)
    r.record(system, first)
    loads[first].in_flight, loads[first].kv_blocks_used = 1, 3  # busier than the other one, within bounds
    assert r.pick(system, loads) == first
    other = prefix_hashes([7] * 100, 16)
    assert r.pick(other, loads) == 1 - first  # an unknown prefix goes to the least loaded


def test_affinity_yields_to_clear_imbalance_full_kv_and_full_queues():
    r, loads = Router("affinity", max_imbalance=2), _loads(2, cap=8)
    h = prefix_hashes(list(range(64)), 16)
    r.record(h, 0)
    loads[0].in_flight = 2  # two requests ahead: still worth the cached prefix
    assert r.pick(h, loads) == 0
    loads[0].in_flight = 3  # three ahead: go to the idle one
    assert r.pick(h, loads) == 1
    loads[0].in_flight, loads[0].kv_blocks_used, loads[0].kv_blocks_total = 0, 98, 100  # it would preempt
    assert r.pick(h, loads) == 1
    loads[0].kv_blocks_used = 0
    loads[0].in_flight = 8  # full
    assert r.pick(h, loads) == 1
    loads[1].in_flight = 8
    assert r.pick(h, loads) is None  # every queue full: the front answers 503


def test_dead_replicas_are_skipped_and_forgotten():
    r, loads = Router("affinity"), _loads(3)
    h = prefix_hashes(list(range(64)), 16)
    r.record(h, 2)
    loads[2].healthy = False
    assert r.pick(h, loads) in (0, 1)
    r.forget_replica(2)
    loads[2].healthy = True
    assert r.pick(h, loads) == 0  # no affinity left; least loaded, lowest id


def test_policies_and_bounds():
    loads = _loads(3)
    assert Router("least_loaded").pick([], loads) == 0
    picks = {Router("random", seed=s).pick([1], loads) for s in range(20)}
    assert picks == {0, 1, 2}
    small = Router("affinity", max_entries=4)
    small.record(list(range(10)), 1)
    assert len(small._owner) == 4
    with pytest.raises(ValueError):
        Router("round_robin")
    with pytest.raises(InvalidRequestError):
        ReplicaConfig(policy="round_robin")
    with pytest.raises(InvalidRequestError):
        ReplicaConfig(replicas=0)
