"""Dashboard pages render the API's data and escape every value."""

from __future__ import annotations

from app.ui.pages import fairness_page, jobs_page, overview_page, queue_page, tuning_page


def test_overview_shows_types_alerts_and_unknown_util():
    html = overview_page(
        {
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
    )
    assert "a100-80g" in html and "50%" in html and "unknown" in html
    assert "11 jobs queued" in html and 'http-equiv="refresh"' in html and 'href="/docs"' in html


def test_values_are_escaped():
    html = queue_page(
        [
            {
                "position": 1,
                "id": "7",
                "name": "<script>x</script>",
                "team": "a&b",
                "pool": "p",
                "priority": "P1",
                "wait_seconds": 65,
                "reason": "q",
            }
        ]
    )
    assert "<script>x" not in html and "&lt;script&gt;" in html and "a&amp;b" in html
    assert "1m05s" in html


def test_fairness_and_jobs_and_tuning_pages():
    rep = {
        "window_s": 3600,
        "overall": {"jobs": 2},
        "alerts": [],
        "groups": {
            "team": [
                {
                    "key": "nlp",
                    "jobs": 2,
                    "wait_p50_s": 10,
                    "wait_p99_s": 30,
                    "p99_p50_ratio": 3.0,
                    "jct_p50_s": 100,
                }
            ]
        },
    }
    html = fairness_page(rep)
    assert "<b>3.00</b>" in html and "no head-of-line" in html
    html = jobs_page(
        [
            {
                "id": 1,
                "name": "j",
                "status": "running",
                "allocations": [{"gpu_type": "v100", "node": "n1"}],
            }
        ],
        filters={"team": "nlp"},
        teams=["nlp", "cv"],
    )
    assert '<option value="nlp" selected>' in html and "v100@n1" in html
    html = tuning_page(
        {"config": {"mode": "recommend"}, "weights": {"v100": 3.2}, "base_weights": {"v100": 4}},
        [
            {
                "at": 1,
                "action": "proposed",
                "changes": [{"gpu_type": "v100", "old": 4, "new": 3.2}],
                "triggers": [],
            }
        ],
    )
    assert "v100 4→3.2" in html and "recommend" in html


def test_pools_page_one_row_per_pool_and_type():
    from app.ui.pages import pools_page

    usage = {
        "pool": "training",
        "pending": 3,
        "gpu_types": {
            "a100": {"guaranteed": 30.0, "used": 20.0, "borrowed": 0.0, "lent": 10.0},
            "v100": {"guaranteed": 0.0, "used": 4.0, "borrowed": 4.0, "lent": 0.0},
        },
    }
    html = pools_page(
        [{"name": "training", "reclaim": "always", "placement": "binpack", "usage": usage}],
        [
            {
                "id": "1",
                "borrower": "training",
                "lender": "inference",
                "gpu_type": "v100",
                "units": 4.0,
                "job_id": "7",
                "state": "active",
            }
        ],
    )
    assert html.count("<tr>") == 1 + 2 + 1 + 1  # header, 2 type rows, lease header, 1 lease
    assert "<b>training</b>" in html and 'href="/ui/jobs/7"' in html
