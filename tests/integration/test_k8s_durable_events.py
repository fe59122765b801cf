"""Finished Pods are recorded after a failed pass and a leader change, on the
Kubernetes backend (fake API server + real PostgreSQL).

The leader polls "succeeded", its recording transaction is killed, then the
leader itself dies; the standby had polled (and dropped) the same report
while standing by. The new leader must still find out from the Pods that the
job finished, instead of leaving it ``running`` with its GPUs and quota.
"""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy.exc import DBAPIError

from app.dispatch.leader import libpq_dsn
from tests.fakekube.db import A100_TRAINING_CONFIG
from tests.fakekube.fixtures import job_row, submit_a100_job, wait_until
from tests.faults import kill_connection_on

CONFIG = A100_TRAINING_CONFIG


def test_finish_survives_a_killed_pass_and_a_leader_change(kube, db_url, sf, a100_replicas):
    d1, d2 = a100_replicas
    c1, c2 = d1.cluster, d2.cluster
    job_id = submit_a100_job(sf, gpus=2)
    d1.run_once()
    d2.run_once()
    assert d1.elector.is_leader and not d2.elector.is_leader
    [pod] = kube.gpuq_pods()
    kube.set_pod_phase("gpuq-jobs", pod["metadata"]["name"], "Running")
    wait_until(lambda: d1.run_once() or job_row(sf, job_id).status == "running")

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
    assert job_row(sf, job_id).status == "running"
    # ... and then the leader itself dies
    with psycopg.connect(libpq_dsn(db_url), autocommit=True) as c:
        c.execute("SELECT pg_terminate_backend(%s, 10000)", (d1.elector.backend_pid,))
    c1.close()
    d2.run_once()
    assert d2.elector.is_leader
    assert job_row(sf, job_id).status == "succeeded"
