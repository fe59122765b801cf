"""Shortest-first within a team (``shortest_first``): estimates order a team's own
queue; promoted jobs (requeued, waited 2x their prediction, or the hard cap) keep their
place by age so a long job is never starved."""

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


def test_a_job_waiting_twice_its_prediction_or_the_cap_goes_before_shorter_ones() -> None:
    old = job("old", submitted_at=0, duration_estimate_s=7200)
    short = job("short", submitted_at=14000, duration_estimate_s=60)
    assert _first([old, short], now=14300) == "short"  # waited 14,300 s < 2 x 7200 s
    assert _first([old, short], now=14500) == "old"  # promoted: 2 x its prediction
    # the hard cap (reservation_after_s) promotes sooner when it is shorter
    short = job("short", submitted_at=1700, duration_estimate_s=60)
    assert _first([old, short], now=1750, reservation_after_s=1800) == "short"
    assert _first([old, short], now=1850, reservation_after_s=1800) == "old"


def test_a_requeued_job_is_not_queued_behind_its_own_teams_younger_small_jobs() -> None:
    """A gang that was preempted comes back with its original submit time; shortest-first
    used to put every younger short job of its team in front of it again."""
    gang = job("gang", submitted_at=0, gpus=1, duration_estimate_s=36000, preemption_count=1)
    small = job("small", submitted_at=500, duration_estimate_s=60)
    assert _first([gang, small], now=600) == "gang"
    fresh = job("gang", submitted_at=0, gpus=1, duration_estimate_s=36000)
    assert _first([fresh, small], now=600) == "small"


def test_priority_still_comes_first() -> None:
    short_p2 = job("short", priority="P2", priority_value=100, duration_estimate_s=60)
    long_p1 = job("long", submitted_at=10, duration_estimate_s=7200)
    assert _first([short_p2, long_p1]) == "long"


def test_a_prediction_from_the_teams_history_orders_jobs_without_an_estimate() -> None:
    """``predicted_s`` (the caller's prediction from the team's history) stands in for a
    missing estimate: in the order, and in the promotion after 2x the prediction."""
    long_ = job("long", submitted_at=0, predicted_s=7200)
    short = job("short", submitted_at=50, predicted_s=60)
    assert _first([long_, short]) == "short"
    unknown = job("unknown", submitted_at=0)
    assert _first([unknown, short]) == "short"
    # the estimate wins over the prediction
    assert _first([job("est", submitted_at=0, duration_estimate_s=30, predicted_s=9000),
                   short]) == "est"
    # waited 2 x its prediction: promoted before younger shorter ones
    old = job("old", submitted_at=0, predicted_s=600)
    assert _first([old, job("s", submitted_at=1200, predicted_s=60)], now=1250) == "old"
    assert _first([job("old", submitted_at=0, predicted_s=900),
                   job("s", submitted_at=1200, predicted_s=60)], now=1250) == "s"
