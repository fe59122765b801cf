"""Exponential backoff with jitter: the one retry delay of every loop that talks to
a server that may be down or overloaded (informers, bind retries).

A constant delay makes every client of a recovering server come back in step and
knock it over again; doubling spreads them out in time, the jitter spreads them
out between clients. The shape is client-go's (k8s.io/apimachinery
pkg/util/wait/backoff.go ``Backoff.Step``: ``duration * factor`` up to ``cap``,
plus ``jitter * duration * rand``); the reflector's list/watch retries use
800 ms, factor 2, cap 30 s, jitter 1.0 (k8s.io/client-go tools/cache/reflector.go
``NewReflectorWithOptions``), which are the defaults here.

Pure: no clock read, the random source is injectable (tests pass a seeded one).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """Delays of consecutive failures; :meth:`reset` after a success."""

    initial_s: float = 0.8
    cap_s: float = 30.0
    factor: float = 2.0
    jitter: float = 1.0  # up to this fraction of the delay is added at random
    rng: random.Random = field(default_factory=random.Random, repr=False)
    failures: int = 0

    def base(self, failures: int) -> float:
        """The delay without jitter after ``failures`` consecutive failures (>= 1)."""
        return min(self.cap_s, self.initial_s * self.factor ** max(0, failures - 1))

    def next(self) -> float:
        """One more failure: the seconds to wait before the next try."""
        self.failures += 1
        d = self.base(self.failures)
        return d + self.jitter * d * self.rng.random()

    def reset(self) -> None:
        self.failures = 0
