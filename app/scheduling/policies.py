"""Scheduling policies by name: the live core and the baselines it is measured against."""

from __future__ import annotations

from collections.abc import Callable

from app.scheduling.baselines import best_fit, fifo_count, fifo_typed, random_fit
from app.scheduling.engine import schedule
from app.scheduling.model import CycleResult, Snapshot

Policy = Callable[[Snapshot], CycleResult]

POLICIES: dict[str, Policy] = {
    "gpuq": schedule,
    "fifo-count": fifo_count,
    "fifo-typed": fifo_typed,
    "random": random_fit,
    "bestfit": best_fit,
}


def get_policy(name: str) -> Policy:
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}") from None
