"""Finished Pods are recorded after a failed pass and a leader change, on the
Kubernetes backend (fake API server + real PostgreSQL; issue 12, defect 1).

The leader polls "succeeded", its recording transaction is killed, then the
leader itself dies; the standby had polled (and dropped) the same report
while standing by. The new leader must still find out from the Pods that the
job finished, instead of leaving it ``running`` with its GPUs and quota.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from sqlalchemy.exc import DBAPIError

from gpuq.clock import utcnow
from gpuq.dispatch.dispatcher import Dispatcher
from gpuq.dispatch.leader import libpq_dsn
from gpuq.domain.spec import JobSpec
from gpuq.store.jobs import submit_job
from gpuq.store.orm import JobRow
from tests.fakekube.fixtures import elector, started_cluster, wait_until
from tests.fakekube.objects import article_a100
from tests.faults import kill_connection_on

CONFIG = """
gpu_types:
  - {name: a100-80g, memory_gb: 80, weight: 10, product: "NVIDIA-A100.*80GB"}
pools:
  - {name: training, gpu_types: [a100-80g], guaranteed: {a100-80g: 160}}
teams:
  - {name: nlp, pool: training, quota_units: 1000}
"""


def _status(sf, job_id) -> str:
    with sf() as s:
        return s.get(JobRow, job_id).status


def test_finish_survives_a_killed_pass_and_a_leader_change(kube, db_url, sf):
    kube.add_node(article_a100("a100-0"))
    lock = f"gpuq-dispatcher-{uuid.uuid4().hex[:8]}"
    replicas = []
    for _ in range(2):
        c = started_cluster(kube, sf)
        replicas.append((Dispatcher(sf, c, elector=elector(db_url, lock)), c))
    (d1, c1), (d2, c2) = replicas
    try:
        with sf() as s:
            spec = JobSpec.model_validate(
                {"name": "sft", "team": "nlp", "resources": {"gpus": 2, "gpu_types": ["a100-80g"]}}
            )
            job_id = submit_job(s, spec, now=utcnow()).job.id
            s.commit()
        d1.run_once()
        d2.run_once()
        assert d1.elector.is_leader and not d2.elector.is_leader
        [pod] = kube.gpuq_pods()
        kube.set_pod_phase("gpuq-jobs", pod["metadata"]["name"], "Running")
        wait_until(lambda: d1.run_once() or _status(sf, job_id) == "running")

        # the fake kubelet finishes the Pod; both replicas' watches see it
        kube.set_pod_phase("gpuq-jobs", pod["metadata"]["name"], "Succeeded")
        wait_until(lambda: str(job_id) in c1.live_job_ids() and any(
            p["status"]["phase"] == "Succeeded" for p in c2.pods.items()
            if p["metadata"]["name"] == pod["metadata"]["name"]
        ))
        d2.run_once()  # the standby polls the report and drops it
        # the leader's recording transaction dies with its connection ...
        with kill_connection_on(sf.kw["bind"], "UPDATE jobs") as hits, pytest.raises(DBAPIError):
            wait_until(lambda: d1.run_once() or False, timeout_s=3)
        assert hits
        assert _status(sf, job_id) == "running"
        # ... and then the leader itself dies
        with psycopg.connect(libpq_dsn(db_url), autocommit=True) as c:
            c.execute("SELECT pg_terminate_backend(%s, 10000)", (d1.elector.backend_pid,))
        c1.close()
        d2.run_once()
        assert d2.elector.is_leader
        assert _status(sf, job_id) == "succeeded"
    finally:
        for d, c in replicas:
            d.elector.release()
            c.close()
