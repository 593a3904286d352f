"""Per-client-IP token buckets, refilled continuously, bursts up to the per-minute rate. No awaits here.

RateLimiter counts requests (`--rate-limit`): each takes one, and an empty bucket is a 429.
TokenRateLimiter counts model tokens (`--rate-limit-tokens`): a request is let in while the client's
bucket is not empty, and charged what it used (prompt + generated tokens, or an encoder's input tokens)
when it ends, so one large request may take the bucket below zero; the client then waits (429 with
Retry-After) until it has refilled above zero. Requests are not refused by what they might use:
a generation's length is known only at its end (the gateways that limit tokens, like OpenAI's, count
used tokens the same way).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from modelc.errors import RateLimitError


class _Buckets:
    """Levels of per-client buckets of `capacity`, refilled at capacity per minute; bounded in number."""

    def __init__(self, capacity: int, clock: Callable[[], float], max_clients: int) -> None:
        self.capacity = capacity
        self._clock = clock
        self._max_clients = max_clients
        self._levels: dict[str, tuple[float, float]] = {}  # client -> (level, last refill time)

    def level(self, client: str) -> tuple[float, float]:
        """(the client's level now, now)."""
        now = self._clock()
        level, last = self._levels.get(client, (float(self.capacity), now))
        return min(float(self.capacity), level + (now - last) * self.capacity / 60.0), now

    def set(self, client: str, level: float, now: float) -> None:
        if len(self._levels) >= self._max_clients and client not in self._levels:
            # A bucket refilled to capacity carries no information: drop those to bound memory.
            self._levels = {c: v for c, v in self._levels.items() if now - v[1] < 60.0}
        self._levels[client] = (level, now)

    def wait_s(self, level: float, target: float) -> float:
        """Seconds until `level` refills to `target`."""
        return (target - level) * 60.0 / self.capacity


class RateLimiter:
    def __init__(
        self, rate_per_min: int, *, clock: Callable[[], float] = time.monotonic, max_clients: int = 65536
    ) -> None:
        self.rate_per_min = rate_per_min
        self._buckets = _Buckets(rate_per_min, clock, max_clients)

    def check(self, client: str) -> None:
        """Take one request for `client` or raise RateLimitError (HTTP 429)."""
        tokens, now = self._buckets.level(client)
        if tokens < 1.0:
            self._buckets.set(client, tokens, now)
            wait_s = self._buckets.wait_s(tokens, 1.0)
            raise RateLimitError(
                f"rate limit of {self.rate_per_min} requests per minute exceeded; retry in {wait_s:.1f}s",
                retry_after_s=max(1, math.ceil(wait_s)),
            )
        self._buckets.set(client, tokens - 1.0, now)


class TokenRateLimiter:
    """`tokens_per_min` model tokens per client IP: check() before a request, charge() after it."""

    def __init__(
        self, tokens_per_min: int, *, clock: Callable[[], float] = time.monotonic, max_clients: int = 65536
    ) -> None:
        self.tokens_per_min = tokens_per_min
        self._buckets = _Buckets(tokens_per_min, clock, max_clients)

    def check(self, client: str) -> None:
        """Let the request in unless the client's bucket is empty (RateLimitError, HTTP 429)."""
        level, now = self._buckets.level(client)
        if level <= 0.0:
            self._buckets.set(client, level, now)
            wait_s = max(self._buckets.wait_s(level, 0.0), 1.0)
            raise RateLimitError(
                f"token rate limit of {self.tokens_per_min} tokens per minute exceeded; retry in {wait_s:.1f}s",
                retry_after_s=max(1, math.ceil(wait_s)),
            )

    def charge(self, client: str, num_tokens: int) -> None:
        """Take what a finished request used (its bucket may go below zero)."""
        if num_tokens <= 0:
            return
        level, now = self._buckets.level(client)
        self._buckets.set(client, level - num_tokens, now)
