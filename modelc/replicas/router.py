"""Router: which engine replica serves a new request. Pure, synchronous; no Ray here.

A replica is scored by how many of the request's leading KV blocks it has probably cached (the
chained block hashes the prefix cache itself computes, remembered per replica as requests are
routed) against how loaded it is (its waiting sequences and KV blocks in use, as it last reported).

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

    def load(self) -> float:
        """0 (idle) .. about 2 (queue full and KV full): what affinity is weighed against."""
        queue = self.in_flight / max(1, self.max_in_flight)
        kv = self.kv_blocks_used / max(1, self.kv_blocks_total)
        return queue + kv


class Router:
    """`pick(hashes, replicas)` -> a replica id with room, or None when every queue is full.

    policy "affinity": the replica holding the longest run of the request's leading block hashes,
    unless its load exceeds the least loaded replica's by more than `load_slack`; "least_loaded";
    "random" (a baseline for the load tests).
    """

    def __init__(self, policy: str = "affinity", *, load_slack: float = 0.5, max_entries: int = 65536, seed: int = 0):
        if policy not in POLICIES:
            raise ValueError(f"unknown routing policy {policy!r} (one of {', '.join(POLICIES)})")
        self.policy = policy
        self.load_slack = load_slack
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
        best = self._longest_prefix_owner(hashes, {r.replica_id: r for r in open_})
        if best is not None and best.load() <= least.load() + self.load_slack:
            return best.replica_id
        return least.replica_id

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

    def _longest_prefix_owner(self, hashes: Sequence[int], open_: dict[int, ReplicaLoad]) -> ReplicaLoad | None:
        """The replica that was last sent this request's first block (record() writes a request's
        whole chain to one replica, so the chain's leading run names where the prefix lives)."""
        owner = self._owner.get(hashes[0]) if hashes else None
        return open_.get(owner) if owner is not None else None
