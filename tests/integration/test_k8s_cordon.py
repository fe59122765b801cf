"""Issue 11 case 3 on the Kubernetes backend (fake API server speaking real
JSON, real PostgreSQL): a job for cards that only a cordoned node has stays
``pending`` with a reason naming the node, not ``unschedulable``; uncordoned
through the API server, the node syncs back and the job is bound."""

from __future__ import annotations

import uuid

from app.clock import utcnow
from app.dispatch.dispatcher import Dispatcher
from app.dispatch.leader import LeaderElector
from app.domain.spec import JobSpec
from app.store.db import make_engine, make_session_factory
from app.store.jobs import submit_job
from app.store.node_rows import gpu_type_configs
from app.store.orm import JobRow
from tests.fakekube.fixtures import kube, make_cluster, wait_until  # noqa: F401 (fixture)
from tests.fakekube.objects import article_a100
from tests.integration.test_k8s_dispatcher import db_url  # noqa: F401


def _job(sf, job_id) -> JobRow:
    with sf() as s:
        return s.get(JobRow, job_id)


def test_cordoned_node_job_waits_then_runs_when_uncordoned(kube, db_url):  # noqa: F811
    cordoned = article_a100("a100-0")
    cordoned["spec"]["unschedulable"] = True
    kube.add_node(cordoned)
    engine = make_engine(db_url, pool_size=4)
    sf = make_session_factory(engine)
    with sf() as s:
        types = gpu_type_configs(s)
    c = make_cluster(kube)
    c.set_gpu_types(types)
    c.start(wait_s=10)
    d = Dispatcher(sf, c, elector=LeaderElector(db_url, f"gpuq-{uuid.uuid4().hex[:8]}"))
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
        engine.dispose()
