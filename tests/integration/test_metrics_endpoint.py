"""/metrics on a seeded cluster: every family present, values from the real dispatcher;
a bearer token required, and each token reads its share (admin and metrics: all; a team:
its own and the cluster-wide series)."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

from app.clock import from_epoch
from app.store.orm import JobEventRow, JobRow, LeaseRow
from tests.integration.obs_env import AUTH, job, seeded_env

FAMILIES = {
    "gpuq_gpu_capacity_units",
    "gpuq_gpu_allocated_units",
    "gpuq_gpu_allocation_ratio",
    "gpuq_gpu_free_cards",
    "gpuq_gpu_free_slices",
    "gpuq_gpu_utilization_ratio",
    "gpuq_gpu_utilization_known",
    "gpuq_tuner_weight",
    "gpuq_pending_jobs",
    "gpuq_queue_wait_seconds",
    "gpuq_job_completion_seconds",
    "gpuq_scheduling_attempts",
    "gpuq_scheduling_failures",
    "gpuq_preemptions",
    "gpuq_lease_reclaims",
    "gpuq_active_leases",
    "gpuq_borrowed_units",
    "gpuq_dispatcher_cycle_seconds",
    "gpuq_alert_head_of_line",
    "gpuq_alert_type_imbalance",
}


@pytest.fixture(scope="module")
def env():
    with seeded_env() as e:
        yield e


def scrape(env, headers: dict[str, str] = AUTH) -> tuple[set[str], dict]:
    r = env.client.get("/metrics", headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    fams, vals = set(), {}
    for fam in text_string_to_metric_families(r.text):
        fams.add(fam.name)
        for s in fam.samples:
            vals[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return fams, vals


def test_metrics_on_a_seeded_cluster(env):
    a = env.submit(job("train-a", "nlp", 2, "a100"))
    env.submit(job("serve-b", "cv", 1, "v100"))
    env.submit(job("train-c", "nlp", 3, "a100"))  # only one whole A100 left after train-a
    env.advance(10)
    env.dispatch()
    # a borrow lease for train-a, as a core with borrowing would record it
    with env.services.session_factory() as s:
        s.add(
            LeaseRow(
                borrower="training",
                lender="inference",
                gpu_type="a100",
                units=20,
                job_id=int(a["id"]),
                started_at=from_epoch(0),
                expires_at=from_epoch(1800),
                state="active",
            )
        )
        s.commit()
    fams, v = scrape(env)
    assert fams >= FAMILIES, sorted(FAMILIES - fams)
    A, V = (("gpu_type", "a100"),), (("gpu_type", "v100"),)
    assert v[("gpuq_gpu_capacity_units", A)] == 40
    assert v[("gpuq_gpu_capacity_units", V)] == 16
    assert v[("gpuq_gpu_allocated_units", A)] == 20
    assert v[("gpuq_gpu_allocated_units", V)] == 4
    assert v[("gpuq_gpu_allocation_ratio", A)] == pytest.approx(0.5)
    assert v[("gpuq_gpu_free_cards", A)] == 1  # 4 cards: 1 MIG-cut, 2 taken
    assert v[("gpuq_gpu_free_slices", A)] == 2
    assert v[("gpuq_gpu_free_cards", V)] == 3
    assert v[("gpuq_tuner_weight", A)] == 10
    assert v[("gpuq_gpu_utilization_known", ())] == 0  # no Prometheus configured: unknown
    assert not any(k[0] == "gpuq_gpu_utilization_ratio" for k in v)
    pend = (("gpu_type", "a100"), ("pool", "training"), ("priority", "P1"))
    assert v[("gpuq_pending_jobs", pend)] == 1
    nlp = (("pool", "training"), ("priority", "P1"), ("team", "nlp"))
    cv = (("pool", "inference"), ("priority", "P2"), ("team", "cv"))
    assert v[("gpuq_queue_wait_seconds_count", nlp)] == 1
    assert v[("gpuq_queue_wait_seconds_sum", nlp)] == pytest.approx(10)
    assert v[("gpuq_queue_wait_seconds_sum", cv)] == pytest.approx(10)
    assert v[("gpuq_scheduling_attempts_total", (("result", "admitted"),))] == 2
    assert v[("gpuq_scheduling_attempts_total", (("result", "pending"),))] == 1
    assert sum(val for (n, _), val in v.items() if n == "gpuq_scheduling_failures_total") == 1
    assert v[("gpuq_dispatcher_cycle_seconds_count", ())] == 1
    lease = (("borrower", "training"), ("gpu_type", "a100"), ("lender", "inference"))
    assert v[("gpuq_active_leases", lease)] == 1
    assert v[("gpuq_borrowed_units", lease)] == 20

    # the jobs run 60 s; then train-c gets its cards
    env.advance(61)
    env.dispatch()  # ingest finishes
    env.dispatch()  # admit train-c
    _, v = scrape(env)
    assert v[("gpuq_job_completion_seconds_count", nlp)] == 1
    assert v[("gpuq_job_completion_seconds_sum", nlp)] == pytest.approx(71)  # 10 wait + 61
    with env.services.session_factory() as s:
        c = s.scalar(select(JobRow).where(JobRow.name == "train-c"))
        assert c.status in ("admitted", "running")
        expect = c.waited_s
    assert v[("gpuq_queue_wait_seconds_count", nlp)] == 2
    assert v[("gpuq_queue_wait_seconds_sum", nlp)] == pytest.approx(10 + expect)
    assert v[("gpuq_gpu_allocated_units", A)] == 30
    # finished jobs are filed under the type they ran on (from their admitted event)
    rep = env.get("/v1/reports/fairness", window_s=3600)
    types = {g["key"]: g["jobs"] for g in rep["groups"]["gpu_type"]}
    assert types == {"a100": 2, "v100": 1}
    statuses = {j["name"]: j["status"] for j in env.get("/v1/jobs")["items"]}
    assert statuses["train-a"] == "succeeded" and statuses["serve-b"] == "succeeded"

    # preemptions and reclaims are counted from the job events (whichever loop wrote
    # them), by the code stored beside the words: the words below are deliberately
    # misleading, and the event without a code (a baseline's text) is "other"
    with env.services.session_factory() as s:
        jid = s.scalar(select(JobRow.id).where(JobRow.name == "train-c"))
        for typ, why, code in [
            ("preempted", "anything said about it", "preempted"),
            ("reclaimed", "lease 3 (20 CU of a100) ...", "reclaimed"),
            ("preempted", "moved off node a100-0 (priority)", "moved"),
            ("preempted", "descheduler (room for P0): preempted by job 9", "preempted"),
            ("preempted", "lease expired, moved by priority", None),
        ]:
            s.add(JobEventRow(job_id=jid, at=env.clock(), type=typ, reason=why,
                              reason_code=code))
        s.commit()
    _, v = scrape(env)
    assert v[("gpuq_preemptions_total", (("reason", "priority"),))] == 2
    assert v[("gpuq_preemptions_total", (("reason", "defragment"),))] == 1
    assert v[("gpuq_preemptions_total", (("reason", "other"),))] == 1
    assert v[("gpuq_lease_reclaims_total", (("reason", "lease_expired"),))] == 1
    _, v = scrape(env)  # counted once
    assert v[("gpuq_preemptions_total", (("reason", "priority"),))] == 2


def sample_team(labels: dict[str, str]) -> str | None:
    """The team a sample is about (a ``team`` label, or a head-of-line alert keyed by
    team); None: cluster-wide. No other label names a team's object (borrower and
    lender are pools)."""
    if "team" in labels:
        return labels["team"]
    return labels["key"] if labels.get("dimension") == "team" else None


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def new_token(env, scope: str, name: str) -> str:
    r = env.client.post("/v1/tokens", json={"scope": scope, "name": name}, headers=AUTH)
    assert r.status_code == 201, r.text
    assert r.json()["scope"] == scope
    return r.json()["token"]


def test_metrics_needs_a_valid_token(env):
    """Fails on the old code: /metrics answered 200 to anyone."""
    r = env.client.get("/metrics")
    assert r.status_code == 401, r.text
    assert "Authorization" in r.json()["detail"]
    for bad in (bearer("gpuqt_nope"), bearer("gpuqm_nope"), {"Authorization": "Basic abc"}):
        r = env.client.get("/metrics", headers=bad)
        assert r.status_code == 401 and r.json()["detail"], r.text
    revoked = new_token(env, "metrics", "revoked-scraper")
    rows = env.get("/v1/tokens")
    token_id = next(t["id"] for t in rows if t["name"] == "revoked-scraper")
    assert env.client.post(f"/v1/tokens/{token_id}/revoke", headers=AUTH).status_code == 200
    assert env.client.get("/metrics", headers=bearer(revoked)).status_code == 401


def test_each_token_reads_its_share_of_the_series(env):
    """The admin and a metrics token read every series; a team token (read-write or
    read-only) reads the series without a team (GPU types, pools, the dispatcher) and
    its own team's, never a sample about another team (a ``team`` label, or a
    head-of-line alert keyed by team). Fails on the old code: a team token read cv's
    queue waits and usage (and without a token at all)."""
    env.submit(job("mine-n", "nlp", 1, "v100"))
    env.submit(job("mine-c", "cv", 1, "v100"))
    env.advance(5)
    env.dispatch()
    metrics_token = new_token(env, "metrics", "prometheus")
    assert metrics_token.startswith("gpuqm_")
    scrape(env)  # a pass that sees the jobs; the scrapes below render it
    state = env.client.app.state
    max_age, state.metrics_max_age_s = getattr(state, "metrics_max_age_s", 5.0), 3600.0
    try:
        # a head-of-line alert per team, as the metrics loop sets them from the report
        for team in ("nlp", "cv"):
            env.services.metrics.alert_head_of_line.labels("team", team).set(1)
        each_token_reads_its_share(env, metrics_token)
    finally:
        state.metrics_max_age_s = max_age


def each_token_reads_its_share(env, metrics_token: str) -> None:
    _, admin = scrape(env)
    about = {k: sample_team(dict(k[1])) for k in admin}
    assert {"nlp", "cv"} <= set(about.values()), sorted(set(about.values()), key=str)
    assert about[("gpuq_alert_head_of_line", (("dimension", "team"), ("key", "cv")))] == "cv"
    _, everything = scrape(env, bearer(metrics_token))
    assert set(everything) == set(admin)

    for scope, team, other in [("team:nlp", "nlp", "cv"), ("team:nlp:read", "nlp", "cv"),
                               ("team:cv", "cv", "nlp"), ("team:cv:read", "cv", "nlp")]:
        _, seen = scrape(env, bearer(new_token(env, scope, f"view-{scope.replace(':', '-')}")))
        assert not [k for k in seen if sample_team(dict(k[1])) == other], scope
        assert set(seen) == {k for k, t in about.items() if t in (None, team)}, scope
        own = (("pool", "training" if team == "nlp" else "inference"),
               ("priority", "P1" if team == "nlp" else "P2"), ("team", team))
        assert seen[("gpuq_queue_wait_seconds_count", own)] >= 1, scope
        assert ("gpuq_team_usage_units", (("gpu_type", "v100"), ("team", team))) in seen
        assert ("gpuq_alert_head_of_line", (("dimension", "team"), ("key", team))) in seen
        assert seen[("gpuq_gpu_capacity_units", (("gpu_type", "v100"),))] == 16


def test_the_metrics_token_reads_metrics_and_nothing_else(env):
    """Scope metrics: GET /metrics, and 403 everywhere else (the API, the dashboard).
    Fails on the old code: the scope did not exist (POST /v1/tokens was a 422)."""
    token = new_token(env, "metrics", "prometheus-only")
    m = bearer(token)
    assert env.client.get("/metrics", headers=m).status_code == 200
    r = env.client.post("/v1/jobs", json=job("sneak", "nlp", 1, "v100"), headers=m)
    assert r.status_code == 403, r.text
    assert "metrics" in r.json()["detail"]
    for path in ("/v1/jobs", "/v1/queue", "/v1/nodes", "/v1/gpu-types", "/v1/whoami",
                 "/v1/tokens", "/v1/reports/fairness", "/v1/teams"):
        r = env.client.get(path, headers=m)
        assert r.status_code == 403 and r.json()["detail"], (path, r.text)
    assert env.client.post("/v1/tokens", json={"scope": "metrics"}, headers=m).status_code == 403
    assert env.client.get("/ui", headers=m).status_code == 403
    r = env.client.post("/ui/login", data={"token": token, "next": "/ui"},
                        follow_redirects=False)
    assert r.status_code == 403 and "gpuq_ui_token" not in r.headers.get("set-cookie", "")
    info = next(t for t in env.get("/v1/tokens") if t["name"] == "prometheus-only")
    assert info["scope"] == "metrics" and info["team"] is None
    # rotated (docs/observability.md): the successor is a metrics token too
    r = env.client.post(f"/v1/tokens/{info['id']}/rotate", headers=AUTH)
    assert r.status_code in (200, 201), r.text
    successor = r.json()["token"]
    assert successor.startswith("gpuqm_") and r.json()["scope"] == "metrics"
    assert env.client.get("/metrics", headers=m).status_code == 401
    assert env.client.get("/metrics", headers=bearer(successor)).status_code == 200
    assert env.client.get("/v1/jobs", headers=bearer(successor)).status_code == 403
