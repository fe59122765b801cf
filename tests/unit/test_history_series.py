"""The History page's pictures (app/reports/history.py): queue depth, CU per GPU type
and each team's wait percentiles, computed from the jobs' own times."""

from __future__ import annotations

from app.reports.history import Span, series

NOW = 10_000.0


def span(team="nlp", gpu_type="a100", status="running", submitted=0.0, admitted=None,
         finished=None, units=20.0, wait_s=0.0) -> Span:
    return Span(team, gpu_type, status, submitted, admitted, finished, units, wait_s)


def test_queue_depth_counts_jobs_between_submit_and_admission():
    items = [
        span(status="pending", submitted=NOW - 3000),  # still waiting
        span(submitted=NOW - 5000, admitted=NOW - 2500),  # waited, then ran
        span(status="cancelled", submitted=NOW - 4000, finished=NOW - 3500),  # gave up
    ]
    s = series(items, NOW, 10_000, points=10)  # one point every 1000 s
    assert s["t"][-1] == NOW and len(s["queue"]) == 10
    # t = 5000: the second job waits; 6000 and 7000: two (cancelled one at 6000 -> it
    # ended at 6500, so only at 6000), then the pending one from 7000 on
    assert s["queue"] == [0, 0, 0, 0, 1, 2, 2, 1, 1, 1]


def test_allocation_per_type_follows_admission_and_end():
    items = [
        span(gpu_type="a100", submitted=0, admitted=NOW - 4000, units=20),  # still running
        span(gpu_type="v100", status="succeeded", submitted=0, admitted=NOW - 6000,
             finished=NOW - 2000, units=8),
        span(gpu_type="v100", status="pending", submitted=NOW - 100, units=0),
    ]
    s = series(items, NOW, 10_000, points=10)
    assert s["allocated"]["a100"] == [0] * 5 + [20.0] * 5
    assert s["allocated"]["v100"] == [0] * 3 + [8.0] * 4 + [0] * 3


def test_waits_per_team_in_the_step_of_their_admission():
    items = [span(team="nlp", admitted=NOW - 50, wait_s=w) for w in (10, 20, 30)]
    items.append(span(team="cv", admitted=NOW - 5000, wait_s=400))
    s = series(items, NOW, 10_000, points=10)
    assert s["wait_p50"]["nlp"][-1] == 20 and s["wait_p99"]["nlp"][-1] > 29
    assert s["wait_p50"]["nlp"][:-1] == [None] * 9
    assert s["wait_p50"]["cv"][4] == 400 and s["wait_p50"]["cv"][5] is None


def test_a_team_filter_keeps_only_those_jobs():
    items = [span(team="nlp", admitted=NOW - 50), span(team="cv", admitted=NOW - 50)]
    s = series(items, NOW, 10_000, points=10, teams=["cv"])
    assert list(s["wait_p50"]) == ["cv"] and s["allocated"]["a100"][-1] == 20.0
