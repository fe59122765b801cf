"""/metrics on a seeded cluster: every family present, values from the real dispatcher."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

from app.clock import from_epoch
from app.store.orm import JobEventRow, JobRow, LeaseRow
from tests.integration.obs_env import job, seeded_env

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


def scrape(env) -> tuple[set[str], dict]:
    r = env.client.get("/metrics")  # open without a token
    assert r.status_code == 200
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
