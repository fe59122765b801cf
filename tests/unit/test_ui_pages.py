"""Dashboard templates render the API's data, escape every value, format for people."""

from __future__ import annotations

from datetime import UTC, datetime

from app.ui.format import num, secs, when
from app.ui.render import render_text
from app.ui.views import hide_others


def test_overview_shows_types_alerts_and_unknown_util():
    util = {
        "gpu_types": [
            {
                "gpu_type": "a100-80g",
                "weight": 10,
                "nodes": 1,
                "cards": 8,
                "capacity_cu": 80.0,
                "allocated_cu": 40.0,
                "allocation_ratio": 0.5,
                "gpu_util": None,
                "free_cards": 4,
                "free_slices": 0,
                "total_slices": 0,
                "pending_jobs": 3,
            }
        ],
        "alerts": [{"type": "type_imbalance", "message": "a100-80g: 11 jobs queued"}],
        "gpu_util_note": "real GPU utilization unknown",
    }
    html = render_text("overview.html", title="GPU types", active="/ui", util=util)
    assert "a100-80g" in html and "50%" in html and "unknown" in html
    assert "11 jobs queued" in html and 'http-equiv="refresh"' in html and 'href="/docs"' in html
    assert '<a href="/ui" class="on">' in html  # the active nav entry


def test_values_are_escaped():
    item = {
        "position": 1,
        "id": "7",
        "name": "<script>x</script>",
        "team": "a&b",
        "pool": "p",
        "priority": "P1",
        "wait_seconds": 65,
        "reason": "q",
        "estimated_start": None,
    }
    html = render_text("queue.html", title="Queue", items=[item], pools=[])
    assert "<script>x" not in html and "&lt;script&gt;" in html and "a&amp;b" in html
    assert "1m05s" in html and "unknown" in html


def test_fairness_jobs_and_tuning_pages():
    rep = {
        "window_s": 3600,
        "overall": {"jobs": 2},
        "alerts": [],
        "groups": {
            "team": [
                {
                    "key": "nlp",
                    "jobs": 2,
                    "wait_p50_s": 100,
                    "wait_p99_s": 300,
                    "p99_p50_ratio": 3.0,
                    "jct_p50_s": 100,
                },
                {   # a P50 of 0.03 s: P99/P50 of 4,490 says nothing and is not shown
                    "key": "cv",
                    "jobs": 50,
                    "wait_p50_s": 0.03,
                    "wait_p99_s": 134.7,
                    "p99_p50_ratio": 4490.0,
                    "jct_p50_s": 100,
                },
            ]
        },
    }
    html = render_text("fairness.html", title="Fairness", report=rep)
    assert "<b>3</b>" in html and "no head-of-line" in html
    assert "4490" not in html and "4,490" not in html and "says nothing" in html
    html = render_text(
        "jobs.html",
        title="Jobs",
        items=[{"id": 1, "name": "j", "status": "running", "where": "v100@n1", "units": 4.0}],
        filters={"team": "nlp"},
        teams=["nlp", "cv"],
        pools=[],
        statuses=["running"],
        priorities=[],
    )
    assert '<option value="nlp" selected>' in html and "v100@n1" in html
    html = render_text(
        "tuning.html",
        title="Weight tuner",
        state={
            "config": {"mode": "recommend"},
            "weights": {"v100": 3.2},
            "base_weights": {"v100": 4},
        },
        history=[
            {
                "at": 1,
                "action": "proposed",
                "changes": [{"gpu_type": "v100", "old": 4, "new": 3.2}],
                "triggers": [],
            }
        ],
    )
    assert "v100 4→3.2" in html and "recommend" in html and "1970-01-01T00:00:01Z" in html


def test_pools_page_one_row_per_pool_and_type():
    usage = {
        "pool": "training",
        "pending": 3,
        "gpu_types": {
            "a100": {"guaranteed": 30.0, "used": 20.0, "borrowed": 0.0, "lent": 10.0},
            "v100": {"guaranteed": 0.0, "used": 4.0, "borrowed": 4.0, "lent": 0.0},
        },
    }
    lease = {
        "id": "1",
        "borrower": "training",
        "lender": "inference",
        "gpu_type": "v100",
        "units": 4.0,
        "job_id": "7",
        "state": "active",
        "visible": True,
    }
    html = render_text(
        "pools.html",
        title="Pools",
        pools=[{"name": "training", "reclaim": "always", "placement": "binpack", "usage": usage}],
        leases=[lease, {**lease, "id": "2", "job_id": "8", "visible": False}],
    )
    assert html.count("<tr") == 1 + 2 + 1 + 2  # header, 2 type rows, lease header, 2 leases
    assert "<b>training</b>" in html and 'href="/ui/jobs/7"' in html
    assert 'href="/ui/jobs/8"' not in html and "another team" in html


def test_queue_hides_other_teams_but_keeps_positions():
    items = [{"position": i + 1, "team": t} for i, t in enumerate(["a", "b", "a", "c"])]
    shown, hidden = hide_others(items, lambda team: team == "a")
    assert [q["position"] for q in shown] == [1, 3] and hidden == 2


def test_people_formats():
    assert num(14.286000000000001) == "14.3" and num(3) == "3" and num(None) == "-"
    assert num(3.33333) == "3.33" and num(2.857) == "2.86" and num(4490.2) == "4,490"
    assert num(1000) == "1,000" and num(0.5) == "0.5" and num(64.0) == "64"
    assert secs(3725) == "1h02m" and secs(-5) == "-5s"
    assert when(datetime(2026, 12, 1, 2, 40, 5, 123456, tzinfo=UTC)) == "2026-12-01T02:40:05Z"
    assert when("2026-12-01T03:40:05+01:00") == "2026-12-01T02:40:05Z"
