"""Router: which engine replica serves a new request. Pure, synchronous; no Ray here.

A request goes to the replica that probably has its leading KV blocks cached (the chained block
hashes the prefix cache itself computes, remembered per replica as requests are routed), unless that
replica is clearly busier than the least loaded one: more than `max_imbalance` requests ahead, or
its KV pool nearly full (where it would preempt). Cache-aware routers (SGLang's) use the same rule:
a modest imbalance costs less than recomputing a long prefix somewhere else.

NOTE: the affinity table is the router's memory of where it sent each prefix, not the replica's
real cache: a replica may since have evicted the blocks. That only costs a recompute there, never
a wrong answer, and the table is bounded (LRU) so it cannot grow without limit.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from modelc.config import ROUTING_POLICIES as POLICIES


@dataclass(slots=True)
class ReplicaLoad:
    """One replica as the router sees it. in_flight: requests the front has sent and not seen end."""

    replica_id: int
    healthy: bool = True
    in_flight: int = 0
    max_in_flight: int = 64
    waiting: int = 0
    running: int = 0
    kv_blocks_used: int = 0
    kv_blocks_total: int = 1

    @property
    def has_room(self) -> bool:
        return self.healthy and self.in_flight < self.max_in_flight

    @property
    def kv_fill(self) -> float:
        return self.kv_blocks_used / max(1, self.kv_blocks_total)

    def load(self) -> tuple[int, float]:
        """Requests ahead of a new one here, then KV fill: the least loaded replica is the minimum."""
        return (self.in_flight + self.waiting, self.kv_fill)


class Router:
    """`pick(hashes, replicas)` -> a replica id with room, or None when every queue is full.

    policy "affinity": the replica holding the request's first block hash, unless it has more than
    `max_imbalance` requests beyond the least loaded replica or its KV fill exceeds `kv_full`;
    "least_loaded"; "random" (a baseline for the load tests).
    """

    def __init__(
        self,
        policy: str = "affinity",
        *,
        max_imbalance: int = 4,
        kv_full: float = 0.95,
        max_entries: int = 65536,
        seed: int = 0,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown routing policy {policy!r} (one of {', '.join(POLICIES)})")
        self.policy = policy
        self.max_imbalance = max_imbalance
        self.kv_full = kv_full
        self.max_entries = max_entries
        self._owner: OrderedDict[int, int] = OrderedDict()  # block hash -> replica id, LRU order
        self._rng = random.Random(seed)

    def pick(self, hashes: Sequence[int], replicas: Sequence[ReplicaLoad]) -> int | None:
        open_ = [r for r in replicas if r.has_room]
        if not open_:
            return None
        if self.policy == "random":
            return self._rng.choice(open_).replica_id
        least = min(open_, key=lambda r: (r.load(), r.replica_id))
        if self.policy == "least_loaded":
            return least.replica_id
        owner = self._prefix_owner(hashes, {r.replica_id: r for r in open_})
        if owner is not None and not self._much_busier(owner, least):
            return owner.replica_id
        return least.replica_id

    def _much_busier(self, owner: ReplicaLoad, least: ReplicaLoad) -> bool:
        ahead = owner.load()[0] - least.load()[0]
        return ahead > self.max_imbalance or (owner.kv_fill > self.kv_full and least.kv_fill <= self.kv_full)

    def record(self, hashes: Sequence[int], replica_id: int) -> None:
        """Remember that `replica_id` now holds these blocks (it was sent the request)."""
        for h in hashes:
            self._owner[h] = replica_id
            self._owner.move_to_end(h)
        while len(self._owner) > self.max_entries:
            self._owner.popitem(last=False)

    def forget_replica(self, replica_id: int) -> None:
        """A replica died: its cache is gone, so is its affinity."""
        for h in [h for h, r in self._owner.items() if r == replica_id]:
            del self._owner[h]

    def _prefix_owner(self, hashes: Sequence[int], open_: dict[int, ReplicaLoad]) -> ReplicaLoad | None:
        """The replica that was last sent this request's first block (record() writes a request's
        whole chain to one replica, so the chain's leading run names where the prefix lives)."""
        owner = self._owner.get(hashes[0]) if hashes else None
        return open_.get(owner) if owner is not None else None
