"""Fairness report against percentiles computed by hand (linear interpolation)."""

from __future__ import annotations

import pytest

from app.domain.percentiles import percentile, ratio
from app.reports.alerts import AlertThresholds, type_imbalance_alerts
from app.reports.fairness import fairness_report, group_stats
from app.reports.records import JobRecord


def rec(
    i,
    wait,
    *,
    team="nlp",
    pool="training",
    prio="P1",
    gt="a100-80g",
    status="succeeded",
    submitted=0.0,
    finished=None,
    admitted=None,
):
    return JobRecord(
        id=str(i),
        team=team,
        pool=pool,
        priority=prio,
        gpu_type=gt,
        status=status,
        submitted_at=submitted,
        wait_s=wait,
        admitted_at=admitted,
        finished_at=finished,
    )


def test_percentile_by_hand():
    xs = [10, 20, 30, 40, 50]
    assert percentile(xs, 50) == 30
    # rank 0.99 * 4 = 3.96 -> 40 + 0.96 * 10
    assert percentile(xs, 99) == pytest.approx(49.6)
    assert percentile([5, 1], 50) == 3  # unsorted input, midpoint
    assert percentile([7], 99) == 7
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile([1], 101)
    assert ratio(4, 2) == 2 and ratio(1, 0) is None and ratio(None, 2) is None


def test_group_stats_by_hand():
    # waits 0..9 (10 jobs); JCT = finished - submitted for succeeded only
    rs = [rec(i, float(i), finished=100.0 + 10 * i) for i in range(10)]
    rs.append(rec(99, 50.0, status="failed", finished=500.0))
    s = group_stats("team", "nlp", rs)
    assert s.jobs == 11 and s.wait_samples == 11
    waits = sorted([*range(10), 50])
    # P50 rank 5 -> waits[5] = 5; P99 rank 9.9 -> 9 + 0.9 * (50 - 9) = 45.9
    assert waits[5] == 5
    assert s.wait_p50_s == 5
    assert s.wait_p99_s == pytest.approx(45.9)
    assert s.p99_p50_ratio == pytest.approx(45.9 / 5)
    # JCTs 100,110,...,190 -> P50 rank 4.5 -> 145
    assert s.jct_samples == 10 and s.jct_p50_s == pytest.approx(145)


def test_report_groups_window_and_head_of_line_alert():
    now = 10_000.0
    # team a: 20 jobs, 19 waited 10s, one waited 1000s -> P99 = 10 + 0.81*990 = 811.9 > 2*10
    a = [rec(i, 10.0, team="a", submitted=now - 100, finished=now - 10) for i in range(19)]
    a.append(rec(19, 1000.0, team="a", submitted=now - 2000, finished=now - 5))
    # team b: 20 jobs all 30s: ratio 1, no alert
    b = [
        rec(100 + i, 30.0, team="b", gt="v100-16g", submitted=now - 50, finished=now - 1)
        for i in range(20)
    ]
    # an old job finished long before the window: excluded
    old = rec(500, 5000.0, team="a", submitted=0.0, finished=10.0)
    # a job still pending counts with its wait so far even if submitted before the window
    pending = rec(600, 9000.0, team="c", status="pending", submitted=now - 9000)
    th = AlertThresholds(hol_min_samples=20, hol_min_p99_s=60)
    rep = fairness_report([*a, *b, old, pending], now=now, window_s=3600, thresholds=th)
    teams = {g["key"]: g for g in rep["groups"]["team"]}
    assert set(teams) == {"a", "b", "c"}
    assert teams["a"]["jobs"] == 20
    assert teams["a"]["wait_p50_s"] == 10
    assert teams["a"]["wait_p99_s"] == pytest.approx(10 + 0.81 * 990)
    assert teams["b"]["p99_p50_ratio"] == pytest.approx(1.0)
    assert teams["c"]["jct_p50_s"] is None
    types = {g["key"]: g["jobs"] for g in rep["groups"]["gpu_type"]}
    assert types == {"a100-80g": 21, "v100-16g": 20}
    assert rep["overall"]["jobs"] == 41
    hol = [x for x in rep["alerts"] if x["type"] == "head_of_line"]
    keys = {(x["dimension"], x["key"]) for x in hol}
    assert ("team", "a") in keys
    assert ("team", "b") not in keys
    # c has one sample: below min_samples, no alert however long the wait
    assert ("team", "c") not in keys
    # with no window the old job is back
    assert fairness_report([*a, old], now=now, window_s=None)["overall"]["jobs"] == 21


def test_head_of_line_needs_samples_and_floor():
    now = 100.0
    few = [rec(i, 1.0, submitted=0) for i in range(4)] + [rec(9, 500.0, submitted=0)]
    th = AlertThresholds(hol_min_samples=6)
    assert fairness_report(few, now=now, window_s=None, thresholds=th)["alerts"] == []
    th = AlertThresholds(hol_min_samples=5, hol_min_p99_s=60)
    alerts = fairness_report(few, now=now, window_s=None, thresholds=th)["alerts"]
    assert {a["dimension"] for a in alerts} == {"team", "pool", "priority", "gpu_type"}
    # all short waits: P99 3s vs P50 1s is above 2x but under the 60 s floor
    tiny = [rec(i, 1.0) for i in range(9)] + [rec(9, 3.0)]
    assert fairness_report(tiny, now=now, window_s=None, thresholds=th)["alerts"] == []


def test_type_imbalance_alert_thresholds():
    th = AlertThresholds()
    # 11 queued > 10 and v100 60% idle > 40%
    alerts = type_imbalance_alerts({"a100": 11, "v100": 0}, {"a100": 0.0, "v100": 0.6}, th)
    assert len(alerts) == 1 and alerts[0].key == "a100"
    assert alerts[0].figures["idle_types"] == {"v100": 0.6}
    # exactly 10 queued: no alert; exactly 40% idle: no alert
    assert type_imbalance_alerts({"a100": 10}, {"a100": 0.0, "v100": 0.9}, th) == []
    assert type_imbalance_alerts({"a100": 50}, {"a100": 0.0, "v100": 0.4}, th) == []
    # its own idleness does not count
    assert type_imbalance_alerts({"a100": 50}, {"a100": 0.9}, th) == []
    th2 = AlertThresholds(imbalance_queued=2, imbalance_idle=0.1)
    assert len(type_imbalance_alerts({"a100": 3}, {"a100": 0, "v100": 0.2}, th2)) == 1
    with pytest.raises(ValueError, match="unknown key .nope. in scheduler.alerts"):
        AlertThresholds.from_mapping({"nope": 1})


def test_one_pass_report_equals_group_stats_of_every_group():
    """fairness_report computes every group in one pass; the figures must be those of
    group_stats over the records of each group (the plain definition)."""
    import random

    from app.reports.fairness import DIMENSIONS, group_by, in_window

    rng = random.Random(5)
    records = [
        rec(
            i,
            rng.choice((None, 0.0, rng.random() * 1000)),
            team=rng.choice(("nlp", "cv", "rl")),
            pool=rng.choice(("training", "inference")),
            prio=rng.choice(("P0", "P1", "P2")),
            gt=rng.choice(("a100-80g", "v100-16g", "mixed")),
            status=rng.choice(("succeeded", "failed", "pending", "running")),
            submitted=rng.random() * 5000,
            finished=rng.choice((None, 6000.0 + rng.random() * 1000)),
        )
        for i in range(2000)
    ]
    for window_s in (None, 1500.0, 3000.0):
        got = fairness_report(records, now=7000.0, window_s=window_s)
        chosen = in_window(records, 7000.0, window_s)
        assert got["overall"] == group_stats("all", "all", chosen).to_dict()
        for dim in DIMENSIONS:
            want = [group_stats(dim, k, rs).to_dict() for k, rs in
                    sorted(group_by(chosen, dim).items())]
            assert got["groups"][dim] == want
    empty = fairness_report([], now=0.0, window_s=None)
    assert empty["overall"] == group_stats("all", "all", []).to_dict()
    assert empty["groups"] == {d: [] for d in DIMENSIONS}
