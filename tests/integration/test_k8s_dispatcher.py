"""Two dispatcher replicas on the Kubernetes backend: one leader, failover,
reconcile, node sync into the nodes table (fake API server + real PostgreSQL)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from app.clock import utcnow
from app.cluster import k8s_labels as L
from app.dispatch.dispatcher import Dispatcher
from app.dispatch.leader import libpq_dsn
from app.domain.spec import JobSpec
from app.store.jobs import submit_job
from app.store.orm import JobEventRow, JobRow, NodeRow
from tests.fakekube.db import A100_TRAINING_CONFIG
from tests.fakekube.fixtures import elector, started_cluster, wait_until
from tests.fakekube.objects import article_a100, node
from tests.realkube.both import BOTH, kube
from tests.realkube.fixtures import job_namespace

CONFIG = A100_TRAINING_CONFIG


def _status(sf, job_id):
    with sf() as s:
        return s.get(JobRow, job_id).status


@BOTH
def test_two_dispatchers_one_leader_failover(kube, db_url, sf):
    kube.add_node(article_a100("a100-0"))
    kube.add_node(article_a100("a100-1"))
    kube.add_node(node("cpu-0"))
    lock = f"gpuq-dispatcher-{uuid.uuid4().hex[:8]}"
    replicas = []
    for _ in range(2):
        c = started_cluster(kube, sf)
        d = Dispatcher(sf, c, elector=elector(db_url, lock), grace_seconds=5)
        replicas.append((d, c))
    (d1, c1), (d2, c2) = replicas
    try:
        with sf() as s:
            spec = JobSpec.model_validate({
                "name": "sft", "team": "nlp", "replicas": 2,
                "resources": {"gpus": 8, "gpu_types": ["a100-80g"], "cpu": 4, "memory_gb": 16},
            })
            job_id = submit_job(s, spec, now=utcnow()).job.id
            s.commit()
        d1.run_once()
        d2.run_once()
        assert d1.elector.is_leader and not d2.elector.is_leader
        # (a real kubelet may have started the Pods within the pass)
        assert _status(sf, job_id) in ("admitted", "running")
        pods = kube.gpuq_pods()
        assert sorted(p["spec"]["nodeName"] for p in pods) == ["a100-0", "a100-1"]
        # the nodes table mirrors the cluster for the API
        with sf() as s:
            rows = {r.name: r for r in s.scalars(select(NodeRow))}
        assert rows["a100-0"].source == "kubernetes" and rows["a100-0"].gpus == 8
        assert rows["cpu-0"].gpu_type is None
        for _ in range(3):  # more passes of both: never a second set of Pods
            d1.run_once()
            d2.run_once()
        assert len(kube.gpuq_pods()) == 2

        for p in pods:
            kube.set_pod_phase(job_namespace(kube), p["metadata"]["name"], "Running")
        wait_until(lambda: d1.run_once() or _status(sf, job_id) == "running")

        # the leader dies: its session (and lock) goes with it
        with psycopg.connect(libpq_dsn(db_url), autocommit=True) as c:
            c.execute("SELECT pg_terminate_backend(%s, 10000)", (d1.elector.backend_pid,))
        c1.close()
        d2.run_once()
        assert d2.elector.is_leader
        d1.run_once()
        assert not d1.elector.is_leader
        assert len(kube.gpuq_pods()) == 2  # adopted, not re-created
        for p in pods:
            kube.set_pod_phase(job_namespace(kube), p["metadata"]["name"], "Succeeded")
        wait_until(lambda: d2.run_once() or _status(sf, job_id) == "succeeded")
    finally:
        for d, c in replicas:
            d.elector.release()
            c.close()


def test_new_leader_removes_half_bound_gang_and_rebinds(kube, db_url, sf):
    """A crash between creating a gang's Pods and binding them all."""
    kube.add_node(article_a100("a100-0"))
    kube.add_node(article_a100("a100-1"))
    lock = f"gpuq-dispatcher-{uuid.uuid4().hex[:8]}"
    c1 = started_cluster(kube, sf)
    d1 = Dispatcher(sf, c1, elector=elector(db_url, lock))
    # the process dies after binding the first replica of the gang
    orig_bind = c1.api.create_namespaced_pod_binding
    calls = []

    def crash_on_second(*args, **kwargs):
        calls.append(args)
        if len(calls) == 2:
            raise _Crash
        return orig_bind(*args, **kwargs)

    c1.api.create_namespaced_pod_binding = crash_on_second
    with sf() as s:
        spec = JobSpec.model_validate({
            "name": "gang", "team": "nlp", "replicas": 2,
            "resources": {"gpus": 8, "gpu_types": ["a100-80g"]},
        })
        job_id = submit_job(s, spec, now=utcnow()).job.id
        s.commit()
    with pytest.raises(_Crash):
        d1.run_once()
    d1.elector.release()
    c1.close()
    pods = kube.gpuq_pods()
    assert len(pods) == 2 and sum(bool(p["spec"].get("nodeName")) for p in pods) == 1
    assert _status(sf, job_id) == "admitted"

    c2 = started_cluster(kube, sf)
    d2 = Dispatcher(sf, c2, elector=elector(db_url, lock))
    try:
        d2.run_once()  # leader: reconcile removes the half gang
        wait_until(lambda: d2.run_once() or (
            len(kube.gpuq_pods()) == 2
            and all(p["spec"].get("nodeName") for p in kube.gpuq_pods())))
        # a whole gang of one bind attempt (the same admission: the same names, made
        # anew once the half gang was gone; while its Pods terminate a create is a 409
        # and the job is admitted anew under new names)
        assert len({p["metadata"]["labels"][L.BIND_ID] for p in kube.gpuq_pods()}) == 1
        assert _status(sf, job_id) in ("admitted", "running")
    finally:
        d2.elector.release()
        c2.close()


class _Crash(BaseException):
    """The process dying mid-call: no except-Exception handler (no undo) runs."""


@BOTH
def test_failed_pod_requeues_up_to_the_retry_limit_then_fails(kube, db_url, sf):
    kube.add_node(article_a100("a100-0"))
    c = started_cluster(kube, sf)
    d = Dispatcher(sf, c, elector=elector(db_url),
                   max_retries=1)
    try:
        with sf() as s:
            spec = JobSpec.model_validate({"name": "flaky", "team": "nlp",
                                           "resources": {"gpus": 1}})
            job_id = submit_job(s, spec, now=utcnow()).job.id
            s.commit()
        names: list[str] = []

        def new_bound_pod():
            fresh = [p for p in kube.gpuq_pods()
                     if p["metadata"]["name"] not in names and p["spec"].get("nodeName")]
            return fresh[0]["metadata"]["name"] if fresh else None

        for _attempt in range(2):
            wait_until(lambda: d.run_once() or new_bound_pod())
            names.append(new_bound_pod())
            kube.set_pod_phase(job_namespace(kube), names[-1], "Failed",
                               terminated={"reason": "Error", "exitCode": 1})
            # first failure: requeued and bound again (a new Pod); second: failed
            wait_until(lambda: d.run_once() or _status(sf, job_id) == "failed"
                       or new_bound_pod())
        with sf() as s:
            types_seen = [e.type for e in s.scalars(
                select(JobEventRow).where(JobEventRow.job_id == job_id)
                .order_by(JobEventRow.id))]
        assert types_seen.count("retried") == 1
        assert len(names) == 2
        assert _status(sf, job_id) == "failed"
        with sf() as s:
            job = s.get(JobRow, job_id)
            assert "exit code 1" in (job.reason or "")
    finally:
        d.elector.release()
        c.close()


@BOTH
def test_invalid_pod_template_fails_the_job_instead_of_retrying_forever(kube, db_url, sf):
    kube.add_node(article_a100("a100-0"))
    c = started_cluster(kube, sf)
    d = Dispatcher(sf, c, elector=elector(db_url))
    try:
        sc = {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
              "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
        with sf() as s:
            ok = JobSpec.model_validate({
                "name": "bad-template", "team": "nlp", "resources": {"gpus": 1},
                "pod_template": {"spec": {"containers": [
                    {"name": "main", "image": "trainer:1", "securityContext": sc}]}},
            })
            job = submit_job(s, ok, now=utcnow()).job
            job_id = job.id
            # a row queued before submit checked templates: its container has no name,
            # which only the API server notices
            job.spec = {**job.spec, "pod_template": {"spec": {"containers": [
                {"image": "trainer:1", "securityContext": sc}]}}}
            s.commit()
        # (one pass on the fake; on a real cluster the node may sync a pass later)
        wait_until(lambda: d.run_once() or _status(sf, job_id) != "pending")
        with sf() as s:
            job = s.get(JobRow, job_id)
            assert job.status == "failed" and "invalid" in job.reason
        assert kube.gpuq_pods() == []
    finally:
        d.elector.release()
        c.close()


@contextmanager
def one_dispatcher(
    kube, db_url: str, sf: sessionmaker, **kw
) -> Iterator[tuple[Dispatcher, sessionmaker]]:
    """A leader-elected dispatcher on the fake cluster; released and closed afterwards."""
    c = started_cluster(kube, sf)
    d = Dispatcher(sf, c, elector=elector(db_url), **kw)
    try:
        yield d, sf
    finally:
        d.elector.release()
        c.close()


@pytest.mark.parametrize("action", ["restart", "fail"])
def test_gang_failure_policy_restarts_the_whole_gang_or_fails_it(kube, db_url, sf, action):
    """One replica of a 2-node gang fails: with ``restart`` the whole gang runs again (new
    Pods for both replicas) up to max_restarts, with ``fail`` the job fails at once; either
    way the healthy replica is stopped, never left holding its GPUs."""
    kube.add_node(article_a100("a100-0"))
    kube.add_node(article_a100("a100-1"))
    with one_dispatcher(kube, db_url, sf) as (d, _):
        with sf() as s:
            spec = JobSpec.model_validate({
                "name": "ddp", "team": "nlp", "replicas": 2,
                "resources": {"gpus": 8, "gpu_types": ["a100-80g"], "cpu": 4, "memory_gb": 16},
                "failure_policy": {"action": action, "max_restarts": 1},
            })
            job_id = submit_job(s, spec, now=utcnow()).job.id
            s.commit()
        seen: set[str] = set()

        def fresh_gang():
            pods = [p for p in kube.gpuq_pods()
                    if p["metadata"]["name"] not in seen and p["spec"].get("nodeName")]
            return sorted(p["metadata"]["name"] for p in pods) if len(pods) == 2 else None

        attempts = 2 if action == "restart" else 1
        for _ in range(attempts):
            wait_until(lambda: d.run_once() or fresh_gang())
            gang = fresh_gang()
            seen.update(gang)
            for name in gang:
                kube.set_pod_phase("gpuq-jobs", name, "Running")
            kube.set_pod_phase("gpuq-jobs", gang[1], "Failed",
                               terminated={"reason": "Error", "exitCode": 3})
            # the healthy replica is evicted by the cluster adapter itself
            wait_until(lambda g=gang: d.run_once() or g[0] in {n for _ns, n, _g in kube.evictions})
        wait_until(lambda: d.run_once() or _status(sf, job_id) == "failed")
        with sf() as s:
            events = [e.type for e in s.scalars(
                select(JobEventRow).where(JobEventRow.job_id == job_id))]
        assert events.count("retried") == attempts - 1
        assert len(seen) == 2 * attempts  # every restart made new Pods for BOTH replicas
        running = [p for p in kube.gpuq_pods()
                   if (p.get("status") or {}).get("phase") in ("Pending", "Running")]
        assert running == []  # nothing is left holding GPUs
        assert kube.services == {}


def test_a_jobs_labels_are_on_its_pods(kube, db_url, sf):
    """The labels a job asks for reach its Pods through a normal pass (the batch
    admission's bind read only part of the spec and dropped them)."""
    kube.add_node(article_a100("a100-0"))
    c = started_cluster(kube, sf)
    d = Dispatcher(sf, c, elector=elector(db_url), grace_seconds=5)
    try:
        with sf() as s:
            spec = JobSpec.model_validate({
                "name": "tagged", "team": "nlp", "labels": {"example.com/run": "r7"},
                "resources": {"gpus": 1, "gpu_types": ["a100-80g"]}})
            submit_job(s, spec, now=utcnow())
            s.commit()
        d.run_once()
        pods = kube.gpuq_pods()
        assert len(pods) == 1 and pods[0]["metadata"]["labels"]["example.com/run"] == "r7"
    finally:
        d.elector.release()
        c.close()
