"""A fenced leader: PostgreSQL drops a dead leader's session quickly, every term has
a new epoch (fencing token) stamped on its Pods, a deposed leader's writes are refused
and its committed plan is not performed, and where a check cannot close the window the
Pod names of an admission do (fake API server + real PostgreSQL)."""

from __future__ import annotations

import time
import uuid

import psycopg
import pytest

from app.cluster import k8s_labels as L
from app.cluster.k8s_pods import stuck_reason
from app.dispatch.dispatcher import Dispatcher
from app.dispatch.leader import SESSION_OPTIONS, NotLeader, libpq_dsn
from tests.fakekube.db import A100_TRAINING_CONFIG
from tests.fakekube.fixtures import (
    elector,
    job_row,
    started_cluster,
    submit_a100_job,
    wait_until,
)
from tests.fakekube.objects import article_a100

CONFIG = A100_TRAINING_CONFIG


def _terminate(db_url: str, pid: int | None) -> None:
    """The leader's session ends (a database failover, its host gone)."""
    with psycopg.connect(libpq_dsn(db_url), autocommit=True) as c:
        c.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))


def test_the_server_drops_a_dead_leaders_session_within_seconds(db_url):
    """The elector's session sets PostgreSQL's own keepalives and tcp_user_timeout: a
    leader host gone without a FIN loses the lock in ~25 s, not the server default's
    2 h 11 min (tcp_keepalives_idle 7200 s)."""
    e = elector(db_url)
    try:
        assert e.ensure()
        conn = e._conn
        if conn.execute("SELECT inet_client_addr()").fetchone()[0] is None:
            pytest.skip("LEADER TCP SETTINGS NOT CHECKED: the test database is reached "
                        "over a Unix socket, where PostgreSQL ignores them")
        got = dict(conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)",
            (list(SESSION_OPTIONS),)).fetchall())
        assert got == SESSION_OPTIONS
    finally:
        e.release()


def test_each_term_has_a_new_epoch(db_url):
    lock = f"gpuq-{uuid.uuid4().hex[:8]}"
    a, b = elector(db_url, lock), elector(db_url, lock)
    try:
        assert a.ensure() and a.epoch is not None
        first = a.epoch
        assert not b.ensure() and b.epoch is None
        _terminate(db_url, a.backend_pid)
        assert b.ensure() and b.epoch == first + 1
        assert not a.ensure() and a.epoch is None
    finally:
        a.release()
        b.release()


def _plan_as_leader(d1):
    """d1 runs a pass up to the committed plan, not the cluster calls."""
    assert d1.elector.ensure()
    d1.sync_cluster()
    plan = d1.reconcile()
    plan.extend(d1.plan_and_commit())
    return plan


def test_a_deposed_leader_does_not_perform_its_committed_plan(kube, db_url, sf, a100_replicas):
    """d1 commits an admission, then loses its session; d2 leads and its reconcile binds
    the admitted job. d1 carrying on with its plan would make a second Pod set."""
    d1, d2 = a100_replicas
    job_id = submit_a100_job(sf)
    plan = _plan_as_leader(d1)
    assert [b.job_id for b in plan.binds] == [str(job_id)]
    _terminate(db_url, d1.elector.backend_pid)
    d2.run_once()
    assert d2.elector.is_leader and len(kube.gpuq_pods()) == 1
    d1.perform(plan)
    pods = kube.gpuq_pods()
    assert len(pods) == 1, "the deposed leader bound the job a second time"
    assert pods[0]["metadata"]["annotations"][L.ANN_LEADER_EPOCH] == str(d2.elector.epoch)


def test_between_its_check_and_its_call_the_pod_names_fence_it(kube, db_url, sf, a100_replicas):
    """Even when the deposed leader's re-check passes (the instant before its session
    died), both leaders bind the same admission under the same Pod names: the
    apiserver refuses the second set (409), and the deposed leader's undo is fenced,
    so the job stays with the new leader's Pods."""
    d1, d2 = a100_replicas
    job_id = submit_a100_job(sf)
    plan = _plan_as_leader(d1)
    _terminate(db_url, d1.elector.backend_pid)
    d2.run_once()
    d1.elector.still_leader = lambda: True  # the check passed a moment too early
    with pytest.raises(NotLeader):
        d1.perform(plan)
    assert len(kube.gpuq_pods()) == 1
    assert job_row(sf, job_id).status in ("admitted", "running")
    # both created it, under one name: the second create was refused
    assert sum(1 for m, p in kube.requests
               if m == "POST" and p.split("?")[0].endswith("/pods")) == 2


def test_a_deposed_leaders_write_is_refused(kube, db_url, sf, a100_replicas):
    """d1's planning transaction commits only in its own epoch: once d2 began a term,
    d1's admissions roll back."""
    d1, d2 = a100_replicas
    job_id = submit_a100_job(sf)
    assert d1.elector.ensure()
    d1.sync_cluster()
    _terminate(db_url, d1.elector.backend_pid)
    assert d2.elector.ensure()
    with pytest.raises(NotLeader):
        d1.plan_and_commit()
    assert job_row(sf, job_id).status == "pending"


def test_a_standby_does_not_act_on_the_cluster(kube, db_url, sf):
    """Only the leader changes the cluster. A Pod whose image never pulls is stopped once
    past its start deadline; a standby that polled the cluster's events stopped it too,
    beside the leader (and would delete finished Pods, bind a workload's Pods)."""
    kube.add_node(article_a100("a100-0"))
    kube.settings = {"start_deadline_s": 0.05}
    lock = f"gpuq-{uuid.uuid4().hex[:8]}"
    clusters = [started_cluster(kube, sf) for _ in range(2)]
    try:
        leader, standby = (Dispatcher(sf, c, elector=elector(db_url, lock)) for c in clusters)
        job_id = submit_a100_job(sf)
        leader.run_once()
        (pod,) = kube.gpuq_pods()
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        kube.set_pod_phase(ns, name, "Pending", waiting={
            "reason": "ImagePullBackOff", "message": "Back-off pulling image"})
        wait_until(lambda: any(stuck_reason(p) for p in clusters[1]._job_pods(str(job_id))))
        time.sleep(0.1)  # past the start deadline
        before = len(kube.requests)
        assert standby.run_once() is None, "the second replica leads"
        changes = [r for r in kube.requests[before:] if r[0] != "GET"]
        assert changes == [], f"the standby changed the cluster: {changes}"
        # the leader does stop it: the case is one a pass acts on
        wait_until(lambda: any(stuck_reason(p) for p in clusters[0]._job_pods(str(job_id))))
        leader.run_once()
        assert any(m in ("DELETE", "POST") and name in p for m, p in kube.requests[before:])
    finally:
        for c in clusters:
            c.close()
