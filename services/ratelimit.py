"""Job submissions per token, bounded by a token bucket: no I/O, the clock is passed in.

Why: the GM's backlog bound (`limits.gm_backlog_tasks`) keeps the queues short, but a client
sending jobs in a tight loop still costs the GM a parse and a check per request, and every
other queue's client waits behind it. Each token (a user queue's, or the cluster token) has
a bucket of `burst` jobs refilled at `rate` jobs/s; a submission finding it empty is answered
429 with the seconds until a job fits, like the backlog's 429, and nothing is accepted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(slots=True)
class TokenBucket:
    rate: float  # jobs per second; 0 or less: no bound
    burst: float  # jobs at once, the bucket's size
    tokens: float = -1.0  # -1: full at the first look
    updated: float = 0.0

    def take(self, now: float, cost: float = 1.0) -> float:
        """Take `cost` if it is there and return 0; else take nothing and return the seconds
        until it would be there."""
        if self.rate <= 0:
            return 0.0
        if self.tokens < 0:
            self.tokens, self.updated = self.burst, now
        self.tokens = min(self.burst, self.tokens + max(0.0, now - self.updated) * self.rate)
        self.updated = max(self.updated, now)
        if self.tokens >= cost:
            self.tokens -= cost
            return 0.0
        return (cost - self.tokens) / self.rate


class SubmissionRates:
    """One bucket per principal name, made on its first submission."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = burst
        self._buckets: dict[str, TokenBucket] = {}

    def wait(self, who: str, now: float) -> float:
        """0 if `who` may submit a job now (and it is counted); else the seconds to wait."""
        bucket = self._buckets.get(who)
        if bucket is None:
            bucket = self._buckets[who] = TokenBucket(self.rate, self.burst)
        return bucket.take(now)


def retry_after(seconds: float) -> int:
    """A `Retry-After` value: whole seconds, at least 1 (HTTP has no fractions)."""
    return max(1, math.ceil(seconds))
