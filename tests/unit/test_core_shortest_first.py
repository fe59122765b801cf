"""Shortest-first within a team (``shortest_first``): estimates order a team's own
queue; aged jobs keep their place by age so a long job is never starved."""

from __future__ import annotations

from app.scheduling.engine import schedule
from app.scheduling.model import SchedulerConfig
from tests.unit.core_fixtures import job, node, snap


def _first(pending, now: float = 100.0, **cfg) -> str:
    res = schedule(snap([node("a", "a100-80g", 1)], pending, now=now,
                        config=SchedulerConfig(**cfg)))
    (adm,) = res.admissions
    return adm.job_id


def test_shorter_estimate_of_the_same_team_goes_first() -> None:
    long_ = job("long", submitted_at=0, duration_estimate_s=7200)
    short = job("short", submitted_at=50, duration_estimate_s=60)
    assert _first([long_, short]) == "short"
    assert _first([long_, short], shortest_first=False) == "long"  # plain age order


def test_a_job_without_estimate_counts_as_unknown_duration() -> None:
    unknown = job("unknown", submitted_at=0)
    short = job("short", submitted_at=50, duration_estimate_s=60)
    longer = job("longer", submitted_at=60, duration_estimate_s=10 * 3600)
    assert _first([unknown, short, longer]) == "short"
    assert _first([unknown, longer]) == "unknown"  # 3600 s (unknown) < 10 h


def test_a_job_due_a_reservation_goes_before_shorter_ones() -> None:
    due = SchedulerConfig().reservation_after_s  # 12 h, as aging_s
    old = job("old", submitted_at=0, duration_estimate_s=7200)
    short = job("short", submitted_at=due - 100, duration_estimate_s=60)
    assert _first([old, short], now=due - 50) == "short"
    assert _first([old, short], now=due + 50) == "old"  # waited > reservation_after_s
    # the same with a shorter reservation_after_s: it, not aging_s, decides
    short = job("short", submitted_at=1700, duration_estimate_s=60)
    assert _first([old, short], now=1750, reservation_after_s=1800) == "short"
    assert _first([old, short], now=1850, reservation_after_s=1800) == "old"


def test_priority_still_comes_first() -> None:
    short_p2 = job("short", priority="P2", priority_value=100, duration_estimate_s=60)
    long_p1 = job("long", submitted_at=10, duration_estimate_s=7200)
    assert _first([short_p2, long_p1]) == "long"
