"""Cluster events survive a failed pass.

The transaction that records what the cluster reported is killed
(``pg_terminate_backend`` on the very connection running it); the events
must be recorded by the next pass, not lost. Before the fix the finished job
stayed ``running`` and was then requeued as "pods lost" and run again.
"""

from __future__ import annotations

import random

import pytest
from sqlalchemy.exc import DBAPIError

from app.dispatch.dispatcher import Dispatcher
from tests.faults import kill_connection_on
from tests.integration.conftest import job_body


def _submit(client, admin, **kw) -> str:
    r = client.post("/v1/jobs", json=job_body(**kw), headers=admin)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _events(client, admin, job_id) -> list[str]:
    return [e["type"] for e in client.get(f"/v1/jobs/{job_id}/events", headers=admin).json()]


def test_finish_recorded_after_the_recording_transaction_is_killed(
    client, admin, session_factory, engine, cluster, clock
):
    d = Dispatcher(session_factory, cluster, clock=clock)
    jid = _submit(client, admin)
    d.run_once()
    assert client.get(f"/v1/jobs/{jid}", headers=admin).json()["status"] == "running"
    clock.advance(100)  # the job's pods finish
    # the statement recording the finish dies with its connection
    with kill_connection_on(engine, "UPDATE jobs") as hits, pytest.raises(DBAPIError):
        d.run_once()
    assert hits, "the fault was not injected"
    assert client.get(f"/v1/jobs/{jid}", headers=admin).json()["status"] == "running"
    d.run_once()
    j = client.get(f"/v1/jobs/{jid}", headers=admin).json()
    assert j["status"] == "succeeded", j
    assert "requeued" not in _events(client, admin, jid)
    assert cluster.bind_calls[jid] == 1  # never run twice


def test_every_finish_recorded_with_connections_killed_during_passes(
    client, admin, session_factory, engine, cluster, clock
):
    """Many jobs, a connection killed at a random statement of every other
    pass: each job runs once and ends succeeded; none is requeued as "pods lost"."""
    rng = random.Random(12)
    d = Dispatcher(session_factory, cluster, clock=clock)
    ids = [
        _submit(client, admin, name=f"j{i}", duration_estimate_s=20 + i % 13,
                resources={"gpus": 1, "gpu_types": ["v100-16g"]})
        for i in range(60)
    ]
    failed = hits_before = 0
    for n in range(200):
        clock.advance(3)
        if n % 2:
            with kill_connection_on(engine, lambda sql: True, skip=rng.randrange(8)) as hit:
                try:
                    d.run_once()
                except DBAPIError:
                    failed += 1
                assert bool(hit) == (failed == hits_before + 1)
                hits_before = failed
        else:
            d.run_once()
        done = client.get("/v1/jobs?status=succeeded&limit=100", headers=admin).json()["items"]
        if len(done) == len(ids):
            break
    assert failed >= 10
    statuses = {i: client.get(f"/v1/jobs/{i}", headers=admin).json()["status"] for i in ids}
    assert set(statuses.values()) == {"succeeded"}, statuses
    for i in ids:
        assert "requeued" not in _events(client, admin, i)
        assert cluster.bind_calls[i] == 1
