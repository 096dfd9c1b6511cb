"""A token bucket per client (token, or address when authentication is off), in process.

Each gunicorn worker keeps its own buckets, so the limit a client meets is per worker:
rate and burst are meant as a guard against a runaway client, not as a quota.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

MAX_CLIENTS = 10_000


@dataclass
class Bucket:
    """Tokens left, and when they were counted."""

    tokens: float
    updated: float


class RateLimiter:
    """``rate_per_second`` requests a second per client, ``burst`` at once; 0 turns it off."""

    def __init__(
        self,
        rate_per_second: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate = rate_per_second
        self.burst = max(burst, 1)
        self._clock = clock
        self._buckets: OrderedDict[str, Bucket] = OrderedDict()
        self._lock = threading.Lock()

    def acquire(self, client: str) -> float | None:
        """Take one request's token: None if allowed, else seconds until one is free."""
        if self.rate <= 0:
            return None
        now = self._clock()
        with self._lock:
            bucket = self._buckets.pop(client, None) or Bucket(float(self.burst), now)
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.updated) * self.rate)
            bucket.updated = now
            self._buckets[client] = bucket  # most recently used last
            if len(self._buckets) > MAX_CLIENTS:
                self._buckets.popitem(last=False)
            if bucket.tokens >= 1:
                bucket.tokens -= 1
                return None
            return (1 - bucket.tokens) / self.rate

    def release(self, client: str) -> None:
        """Give back a token taken by :meth:`acquire` for a request that does not count."""
        with self._lock:
            bucket = self._buckets.get(client)
            if bucket is not None:
                bucket.tokens = min(self.burst, bucket.tokens + 1)


def retry_after_header(seconds: float) -> str:
    """``Retry-After`` in whole seconds, at least 1."""
    return str(max(1, math.ceil(seconds)))
