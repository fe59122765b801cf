"""Clocks. Loops and the simulated cluster take a clock callable so tests
control time; only this module reads the wall clock."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    return datetime.now(UTC)


def to_epoch(t: datetime) -> float:
    return t.timestamp()


def from_epoch(x: float) -> datetime:
    return datetime.fromtimestamp(x, UTC)


class ManualClock:
    """A clock that moves only when told (tests, virtual time)."""

    def __init__(self, start: datetime | None = None) -> None:
        self.t = start or datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.t

    def advance(self, seconds: float) -> datetime:
        self.t += timedelta(seconds=seconds)
        return self.t
