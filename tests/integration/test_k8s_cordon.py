"""Cordoned capacity on the Kubernetes backend (fake API server speaking real
JSON, real PostgreSQL): a job for cards that only a cordoned node has stays
``pending`` with a reason naming the node, not ``unschedulable``; uncordoned
through the API server, the node syncs back and the job is bound."""

from __future__ import annotations

from app.clock import utcnow
from app.dispatch.dispatcher import Dispatcher
from app.domain.spec import JobSpec
from app.store.jobs import submit_job
from app.store.orm import JobRow
from tests.fakekube.fixtures import elector, started_cluster, wait_until
from tests.fakekube.objects import article_a100
from tests.realkube.both import BOTH, kube


def _job(sf, job_id) -> JobRow:
    with sf() as s:
        return s.get(JobRow, job_id)


@BOTH
def test_cordoned_node_job_waits_then_runs_when_uncordoned(kube, db_url, sf):  # noqa: F811
    cordoned = article_a100("a100-0")
    cordoned["spec"]["unschedulable"] = True
    kube.add_node(cordoned)
    c = started_cluster(kube, sf)
    d = Dispatcher(sf, c, elector=elector(db_url))
    try:
        wait_until(lambda: any(not n.schedulable for n in c.list_nodes()))
        with sf() as s:
            spec = JobSpec.model_validate({"name": "after-upgrade", "team": "nlp",
                                           "resources": {"gpus": 2}})
            job_id = submit_job(s, spec, now=utcnow()).job.id
            s.commit()
        wait_until(lambda: d.run_once() or _job(sf, job_id).reason is not None)
        for _ in range(3):
            d.run_once()
            job = _job(sf, job_id)
            assert job.status == "pending", (job.status, job.reason)
        assert job.reason.startswith("waits for nodes that are cordoned or not ready (a100-0)")
        kube.update_node("a100-0", lambda n: n["spec"].__setitem__("unschedulable", False))
        wait_until(lambda: d.run_once() or _job(sf, job_id).status in ("admitted", "running"))
        assert any(p["spec"].get("nodeName") == "a100-0" for p in kube.gpuq_pods())
    finally:
        d.elector.release()
        c.close()


@BOTH
def test_gpuq_cordon_holds_on_a_kubernetes_node_across_syncs(kube, db_url, sf):  # noqa: F811
    """gpuq's own cordon (nodes.cordon) on a node Kubernetes defines: the node sync
    rewrites the row's definition and leaves the cordon; the job waits, then runs
    once it is lifted."""
    from datetime import UTC, datetime

    from app.store.audit import WriteBy
    from app.store.cordon import cordon_node, uncordon_node
    from app.store.orm import NodeRow

    kube.add_node(article_a100("a100-0"))
    c = started_cluster(kube, sf)
    d = Dispatcher(sf, c, elector=elector(db_url))
    by = WriteBy("token:admin", datetime.now(UTC))
    try:
        wait_until(lambda: d.run_once() or _node_row(sf, "a100-0") is not None)
        with sf() as s:
            cordon_node(s, s.get(NodeRow, "a100-0"), by, "fan")
            spec = JobSpec.model_validate({"name": "after-fan", "team": "nlp",
                                           "resources": {"gpus": 2}})
            job_id = submit_job(s, spec, now=utcnow()).job.id
            s.commit()
        kube.update_node("a100-0", lambda n: n["metadata"]["labels"].__setitem__("x", "y"))
        for _ in range(4):  # the label change syncs the row; the cordon stays
            d.run_once()
        job = _job(sf, job_id)
        assert job.status == "pending", (job.status, job.reason)
        assert "cordoned" in (job.reason or ""), job.reason
        assert _node_row(sf, "a100-0").cordon["reason"] == "fan"
        with sf() as s:
            uncordon_node(s, s.get(NodeRow, "a100-0"), by)
            s.commit()
        wait_until(lambda: d.run_once() or _job(sf, job_id).status in ("admitted", "running"))
    finally:
        d.elector.release()
        c.close()


def _node_row(sf, name):
    from app.store.orm import NodeRow

    with sf() as s:
        return s.get(NodeRow, name)
