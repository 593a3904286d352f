"""Per-client-IP token bucket: `rate` requests per minute, bursts up to `rate`. No awaits here."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from modelc.errors import RateLimitError


class RateLimiter:
    def __init__(
        self, rate_per_min: int, *, clock: Callable[[], float] = time.monotonic, max_clients: int = 65536
    ) -> None:
        self.rate_per_min = rate_per_min
        self._clock = clock
        self._max_clients = max_clients
        self._buckets: dict[str, tuple[float, float]] = {}  # ip -> (tokens, last refill time)

    def check(self, client: str) -> None:
        """Take one token for `client` or raise RateLimitError (HTTP 429)."""
        now = self._clock()
        tokens, last = self._buckets.get(client, (float(self.rate_per_min), now))
        tokens = min(float(self.rate_per_min), tokens + (now - last) * self.rate_per_min / 60.0)
        if tokens < 1.0:
            self._buckets[client] = (tokens, now)
            wait_s = (1.0 - tokens) * 60.0 / self.rate_per_min
            raise RateLimitError(
                f"rate limit of {self.rate_per_min} requests per minute exceeded; retry in {wait_s:.1f}s",
                retry_after_s=max(1, math.ceil(wait_s)),
            )
        if len(self._buckets) >= self._max_clients and client not in self._buckets:
            self._forget_full_buckets(now)
        self._buckets[client] = (tokens - 1.0, now)

    def _forget_full_buckets(self, now: float) -> None:
        # A bucket refilled to capacity carries no information: drop it to bound memory.
        full_after_s = 60.0
        self._buckets = {ip: v for ip, v in self._buckets.items() if now - v[1] < full_after_s}
