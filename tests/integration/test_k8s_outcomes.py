"""A finished Pod that goes while gpuq cannot see it still tells its outcome: gpuq's
Pods carry its outcome finalizer (``gpuq.io/outcome``), so the apiserver keeps them,
Terminating, until gpuq has recorded how they ended; then gpuq takes it off and the
object goes. Run on the fake API server (which honours finalizers as
k8s.io/apiserver's store.go does) and on the real control plane (fake/real PostgreSQL
is real in both)."""

from __future__ import annotations

import datetime as dt
import math

from sqlalchemy import select

from app.cluster import k8s_labels as L
from app.cluster.k8s_pods import DEADLINE_MARGIN_S
from app.dispatch.dispatcher import Dispatcher
from app.store.orm import AllocationRow, JobEventRow
from tests.fakekube.db import A100_TRAINING_CONFIG
from tests.fakekube.fixtures import job_row, started_cluster, submit_a100_job, wait_until
from tests.fakekube.objects import article_a100
from tests.realkube.both import BOTH, kube  # noqa: F401  (the fixture: fake and real)
from tests.realkube.fixtures import job_namespace

CONFIG = A100_TRAINING_CONFIG


def _pod(kube, ns: str, name: str) -> dict | None:
    if hasattr(kube, "pod"):  # the real cluster
        return kube.pod(ns, name)
    with kube.cond:
        return kube.pods.get((ns, name))


def _event_types(sf, job_id: int) -> list[str]:
    with sf() as s:
        return [f"{e.type}:{e.to_status}" for e in s.scalars(
            select(JobEventRow).where(JobEventRow.job_id == job_id).order_by(JobEventRow.id))]


def _run_then_go_down(kube, sf) -> tuple[int, str, str]:
    """A dispatcher binds a job and sees it run, then goes down (its watches closed)."""
    kube.add_node(article_a100("a100-0"))
    c = started_cluster(kube, sf)
    d = Dispatcher(sf, c)
    job_id = submit_a100_job(sf)
    wait_until(lambda: d.run_once() or kube.gpuq_pods(), 30)
    [pod] = kube.gpuq_pods()
    ns, name = job_namespace(kube), pod["metadata"]["name"]
    kube.set_pod_phase(ns, name, "Running")
    wait_until(lambda: d.run_once() or job_row(sf, job_id).status == "running", 30)
    c.close()
    return job_id, ns, name


def _come_back(kube, sf, job_id: int, ns: str, name: str) -> None:
    """A new dispatcher starts and runs a few passes; the Pod is then gone for good."""
    c = started_cluster(kube, sf)
    try:
        d = Dispatcher(sf, c)
        wait_until(lambda: d.run_once() or job_row(sf, job_id).status not in (
            "admitted", "running"), 30)
        for _ in range(3):
            d.run_once()
        # nothing left stuck Terminating: the finalizer came off once the end was recorded
        wait_until(lambda: d.run_once() or _pod(kube, ns, name) is None, 30)
    finally:
        c.close()


@BOTH
def test_a_pod_that_succeeded_and_was_deleted_while_the_dispatcher_was_down_is_not_rerun(
        kube, sf):
    """The Pod succeeds and is deleted (PodGC, a user's clean-up) while no dispatcher
    runs. Without the finalizer the object was gone, the job looked lost and ran again;
    now it ends succeeded, once, and no second Pod is made."""
    job_id, ns, name = _run_then_go_down(kube, sf)
    kube.set_pod_phase(ns, name, "Succeeded")
    kube.delete_pod(ns, name)
    held = _pod(kube, ns, name)
    assert held is not None and held["metadata"].get("deletionTimestamp"), \
        "the apiserver let the Pod go before gpuq read its outcome"
    _come_back(kube, sf, job_id, ns, name)
    assert job_row(sf, job_id).status == "succeeded"
    events = _event_types(sf, job_id)
    assert events.count("succeeded:succeeded") == 1, events
    assert not [e for e in events if e.startswith("requeued")], events
    assert [e for e in events if e.endswith(":admitted")] == ["admitted:admitted"], events
    assert kube.gpuq_pods() == [], "the job was bound again"


@BOTH
def test_a_pod_that_failed_before_it_was_deleted_fails_the_job_once(kube, sf):
    """The workload fails on its own (exit 1), then the finished Pod is deleted while no
    dispatcher runs: the failure is the workload's (its container ended before the
    deletion was asked), so the job fails with its reason and is not requeued as if the
    infrastructure had ended it."""
    job_id, ns, name = _run_then_go_down(kube, sf)
    finished = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5)).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    kube.set_pod_phase(ns, name, "Failed", terminated={
        "exitCode": 1, "reason": "Error", "finishedAt": finished})
    kube.delete_pod(ns, name)
    _come_back(kube, sf, job_id, ns, name)
    row = job_row(sf, job_id)
    assert row.status == "failed", (row.status, row.reason)
    assert "exit code 1" in (row.reason or "") or "Error" in (row.reason or ""), row.reason
    assert not [e for e in _event_types(sf, job_id) if e.startswith("requeued")]
    assert kube.gpuq_pods() == []


DEVICE_MANAGER = ("UnexpectedAdmissionError", "Allocate failed due to requested number of "
                  "devices unavailable for nvidia.com/gpu. Requested: 1, Available: 0, which "
                  "is unexpected")


def test_a_kubelet_refusal_requeues_the_job_onto_another_node(kube, sf, monkeypatch):
    """The kubelet of the node gpuq chose refuses the Pod at admission (its device
    manager has no card to give: a lost race, cards gone unhealthy before allocatable
    says so; pkg/kubelet/cm/devicemanager/manager.go). The job is requeued without
    spending a retry, and its next placement avoids that node: before, gpuq put it
    straight back there, to be refused again every pass."""
    from tests.fakekube import kubelet

    kube.add_node(article_a100("a100-0"))
    kube.add_node(article_a100("a100-1"))
    refusing: list[str] = []
    admit = kubelet.admit

    def device_manager(node, pod, others):
        refusing[:] = refusing or [node["metadata"]["name"]]  # the first node chosen
        return DEVICE_MANAGER if node["metadata"]["name"] == refusing[0] else admit(
            node, pod, others)

    monkeypatch.setattr(kubelet, "admit", device_manager)
    c = started_cluster(kube, sf)
    try:
        d = Dispatcher(sf, c)
        job_id = submit_a100_job(sf)

        def placed_elsewhere() -> bool:
            d.run_once()
            return any(p["spec"].get("nodeName") not in (None, refusing[0])
                       for p in kube.gpuq_pods()) if refusing else False

        wait_until(placed_elsewhere, 20)
        assert [r for _ns, _p, r in kube.rejected] == ["UnexpectedAdmissionError"], \
            "the job went back to the refusing node"
        assert job_row(sf, job_id).status in ("admitted", "running")
        events = _event_types(sf, job_id)
        assert [e for e in events if e.startswith("requeued")] == ["requeued:pending"], events
    finally:
        c.close()


@BOTH
def test_a_run_that_reaches_its_time_limit_is_evicted_and_the_job_fails(kube, sf):
    """``time_limit_s``: once the job has run that long the dispatcher evicts its Pods (the
    kubelet's grace period applies) and the job ends ``failed`` with reason ``time limit``;
    the Pod's end, reported after, does not change that, and the card is released once the
    Pod is gone."""
    kube.add_node(article_a100("a100-0"))
    c = started_cluster(kube, sf)
    try:
        d = Dispatcher(sf, c)
        job_id = submit_a100_job(sf, time_limit_s=1.0)
        wait_until(lambda: d.run_once() or kube.gpuq_pods(), 30)
        [pod] = kube.gpuq_pods()
        ns, name = job_namespace(kube), pod["metadata"]["name"]
        kube.set_pod_phase(ns, name, "Running")
        wait_until(lambda: d.run_once() or job_row(sf, job_id).status == "running", 30)
        wait_until(lambda: d.run_once() or job_row(sf, job_id).status == "failed", 30)
        row = job_row(sf, job_id)
        assert row.reason == "time limit: stopped after running 1 s (time_limit_s)", row.reason
        assert _event_types(sf, job_id)[-1] == "failed:failed"

        def gone() -> bool:
            d.run_once()
            p = _pod(kube, ns, name)
            return p is None or p["metadata"].get("deletionTimestamp") is not None
        wait_until(gone, 60)

        def released() -> bool:
            d.run_once()
            with sf() as s:
                return not s.scalars(select(AllocationRow.id)
                                     .where(AllocationRow.job_id == job_id)).first()
        wait_until(released, 60)
        assert job_row(sf, job_id).status == "failed"
    finally:
        c.close()


@BOTH
def test_a_time_limited_jobs_pods_carry_a_deadline_past_it(kube, sf):
    """The kubelet's backstop: gpuq's Pods of a job with ``time_limit_s`` carry
    ``activeDeadlineSeconds`` of the limit, the longest a Pod may take to start and a
    minute (accepted by the API server); a job without a limit gets none."""
    kube.add_node(article_a100("a100-0"))
    c = started_cluster(kube, sf)
    try:
        d = Dispatcher(sf, c)
        limited = submit_a100_job(sf, time_limit_s=100.5, name="limited")
        free = submit_a100_job(sf, name="free")
        wait_until(lambda: d.run_once() or len(kube.gpuq_pods()) == 2, 30)
        deadlines = {p["metadata"]["labels"][L.JOB_ID]: p["spec"].get("activeDeadlineSeconds")
                     for p in kube.gpuq_pods()}
        want = math.ceil(100.5 + c.ks.start_deadline_s) + DEADLINE_MARGIN_S
        assert deadlines == {str(limited): want, str(free): None}
    finally:
        c.close()


def test_a_run_the_kubelet_ended_at_its_deadline_ends_at_its_time_limit(kube, sf):
    """No dispatcher leads while a run passes its limit, and the kubelet ends its Pod at
    the deadline (modelled by the fake: pkg/kubelet/active_deadline.go): the next leader
    reads that end as the time limit, and the job ends ``failed``, not retried although
    its failure policy restarts."""
    kube.add_node(article_a100("a100-0"))
    c = started_cluster(kube, sf)
    try:
        d = Dispatcher(sf, c)
        job_id = submit_a100_job(sf, time_limit_s=1.0,
                                 failure_policy={"action": "restart", "max_restarts": 3})
        wait_until(lambda: d.run_once() or kube.gpuq_pods(), 30)
        [pod] = kube.gpuq_pods()
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        kube.set_pod_phase(ns, name, "Running")
        wait_until(lambda: d.ingest_events() or job_row(sf, job_id).status == "running", 30)
        wait_until(lambda: (dt.datetime.now(dt.UTC) - job_row(sf, job_id).started_at)
                   .total_seconds() > 1.0, 30)  # no pass meanwhile: the dispatcher is down
        kube.exceed_deadline(ns, name)
        wait_until(lambda: d.run_once() or job_row(sf, job_id).status != "running", 30)
        row = job_row(sf, job_id)
        assert row.status == "failed", (row.status, row.reason)
        assert row.reason.startswith("time limit: ran past 1 s (time_limit_s); "), row.reason
        assert row.reason.endswith("DeadlineExceeded: Pod was active on the node longer "
                                   "than the specified deadline"), row.reason
        assert "retried:pending" not in _event_types(sf, job_id)
    finally:
        c.close()
