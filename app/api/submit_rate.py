"""Per-team submit rate: a token bucket per team in each API process.

Why: the pending cap (app/store/team_limits.py) bounds what one team puts in
front of the scheduler; the rate bounds how fast it can make the API and the
database work for it (200,000 jobs in 45 s took the server to 3.1 GB). A team
may submit ``burst`` jobs at once (one full ``POST /v1/jobs:batch`` by default)
and ``rate`` jobs per second after that; a submit past it is a 429 whose
``Retry-After`` says when the bucket holds enough again.

Each API process keeps its own buckets (no database write per submit), so with
N replicas a team's sustained rate is at most N x ``rate``. Only team tokens
are limited: an admin acts for the install.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

from app.domain.errors import InputError, TooManyRequests


@dataclass
class _Bucket:
    tokens: float
    at: float


class SubmitRate:
    """Token buckets keyed by team; ``take`` is thread-safe (submits run in worker
    threads). ``now`` is a monotonic reading passed by the caller."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate  # jobs per second; 0: no limit
        self.burst = burst
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def take(self, team: str, n: int, now: float, rate: float | None = None) -> None:
        """Take ``n`` jobs from ``team``'s bucket or raise :class:`TooManyRequests`
        (nothing taken); ``rate`` is the team's own rate, None: the install's."""
        r = rate if rate is not None else self.rate
        if not r or r <= 0:
            return
        if n > self.burst:
            raise InputError(f"{n} jobs in one request, more than the {self.burst} a team "
                             "may submit at once (GPUQ_TEAM_SUBMIT_BURST)", "jobs")
        with self._lock:
            b = self._buckets.get(team)
            if b is None:
                b = self._buckets[team] = _Bucket(float(self.burst), now)
            b.tokens = min(float(self.burst), b.tokens + max(0.0, now - b.at) * r)
            b.at = now
            if b.tokens >= n:
                b.tokens -= n
                return
            wait = (n - b.tokens) / r
        raise TooManyRequests(
            f"team {team} submits faster than its {r:g} jobs/s (bursts up to "
            f"{self.burst}); retry after {math.ceil(wait)} s", math.ceil(wait), "team")
