"""GET /v1/reports/*: fairness against percentiles computed by hand, both alerts, bad input."""

from __future__ import annotations

from datetime import timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.store.orm import JobEventRow, JobRow
from tests.integration.obs_env import AUTH, job, seeded_env


def insert_finished(env, name, team, pool, prio, node, *, wait, run, ago):
    """A job that waited ``wait`` s, ran ``run`` s and was submitted ``ago`` s before now."""
    now = env.clock()
    sub = now - timedelta(seconds=ago)
    adm = sub + timedelta(seconds=wait)
    fin = adm + timedelta(seconds=run)
    with env.services.session_factory() as s:
        row = JobRow(
            name=name,
            team=team,
            pool=pool,
            priority=prio,
            status="succeeded",
            spec={"name": name, "team": team, "resources": {"gpus": 1}},
            units=1.0,
            submitted_at=sub,
            queued_at=None,
            waited_s=float(wait),
            admitted_at=adm,
            started_at=adm,
            finished_at=fin,
            preemption_count=0,
        )
        s.add(row)
        s.flush()
        s.add(
            JobEventRow(
                job_id=row.id,
                at=adm,
                type="admitted",
                from_status="pending",
                to_status="admitted",
                data={"nodes": [node]},
            )
        )
        s.commit()


@pytest.fixture(scope="module")
def env():
    with seeded_env() as e:
        for i, w in enumerate([10, 20, 30, 40, 50, 600]):
            insert_finished(
                e, f"n{i}", "nlp", "training", "P1", "a100-0", wait=w, run=100, ago=1000
            )
        for i in range(5):
            insert_finished(
                e, f"c{i}", "cv", "inference", "P2", "v100-0", wait=100, run=50, ago=500
            )
        # long before the window: must not count
        insert_finished(e, "old", "nlp", "training", "P1", "a100-0", wait=9999, run=10, ago=50_000)
        yield e


def by_key(groups):
    return {g["key"]: g for g in groups}


def test_fairness_report_matches_hand_computed_percentiles(env):
    rep = env.get("/v1/reports/fairness", window_s=3600)
    teams = by_key(rep["groups"]["team"])
    nlp, cv = teams["nlp"], teams["cv"]
    assert nlp["jobs"] == 6 and cv["jobs"] == 5
    # waits 10,20,30,40,50,600: P50 at rank 2.5 -> 35; P99 at rank 4.95 -> 50 + 0.95*550
    assert nlp["wait_p50_s"] == pytest.approx(35)
    assert nlp["wait_p99_s"] == pytest.approx(572.5)
    assert nlp["p99_p50_ratio"] == round(572.5 / 35, 3)  # numbers rounded for people
    # JCT = wait + run: 110..150, 700 -> P50 = 135
    assert nlp["jct_p50_s"] == pytest.approx(135)
    assert cv["wait_p50_s"] == cv["wait_p99_s"] == pytest.approx(100)
    assert cv["p99_p50_ratio"] == pytest.approx(1)
    assert cv["jct_p50_s"] == pytest.approx(150)
    assert by_key(rep["groups"]["gpu_type"])["a100"]["jobs"] == 6  # from the admitted events
    assert by_key(rep["groups"]["gpu_type"])["v100"]["jobs"] == 5
    assert set(by_key(rep["groups"]["pool"])) == {"training", "inference"}
    assert set(by_key(rep["groups"]["priority"])) == {"P1", "P2"}
    assert rep["overall"]["jobs"] == 11
    # head-of-line: nlp (and its pool/priority/type) but not cv
    hol = {(a["dimension"], a["key"]) for a in rep["alerts"] if a["type"] == "head_of_line"}
    assert ("team", "nlp") in hol and ("team", "cv") not in hol
    # a window of all time brings the old job back
    assert env.get("/v1/reports/fairness", window_s=10**7)["overall"]["jobs"] == 12


def test_head_of_line_alert_is_a_metric(env):
    text = env.client.get("/metrics", headers=AUTH).text
    got = {
        (s.labels["dimension"], s.labels["key"])
        for fam in text_string_to_metric_families(text)
        if fam.name == "gpuq_alert_head_of_line"
        for s in fam.samples
        if s.value == 1
    }
    assert ("team", "nlp") in got and ("team", "cv") not in got


def test_bad_input_and_auth(env):
    r = env.client.get("/v1/reports/fairness", params={"window_s": -5}, headers=AUTH)
    assert r.status_code == 422 and "window_s" in r.json()["detail"]
    r = env.client.get("/v1/reports/fairness", params={"window_s": "soon"}, headers=AUTH)
    assert r.status_code == 422
    assert env.client.get("/v1/reports/utilization").status_code == 401


def test_type_imbalance_alert():
    with seeded_env() as env:
        for i in range(11):
            env.submit(job(f"big-{i}", "nlp", 1, "a100"))
        rep = env.get("/v1/reports/utilization")
        rows = by_key([{**r, "key": r["gpu_type"]} for r in rep["gpu_types"]])
        assert rows["a100"]["pending_jobs"] == 11
        assert rows["v100"]["idle_ratio"] == 1.0
        assert rep["gpu_util_note"] and rep["gpu_util_source"] is None
        alerts = [a for a in rep["alerts"] if a["type"] == "type_imbalance"]
        assert [a["key"] for a in alerts] == ["a100"]
        assert alerts[0]["figures"]["idle_types"] == {"v100": 1.0}
        text = env.client.get("/metrics", headers=AUTH).text
        assert 'gpuq_alert_type_imbalance{gpu_type="a100"} 1.0' in text
        # ten queued is not "more than 10": cancel one and the alert clears
        first = env.get("/v1/jobs", team="nlp", limit=1)["items"][0]
        env.client.post(f"/v1/jobs/{first['id']}/cancel", headers=AUTH)
        assert env.get("/v1/reports/utilization")["alerts"] == []
        assert "gpuq_alert_type_imbalance{" not in env.client.get("/metrics", headers=AUTH).text
