"""Admin writes to a node under running jobs: refused with a 409 naming the jobs
(``PATCH /v1/nodes/v100-1 {"gpus": 4}`` under an 8-card job answered 200
and every pass after it failed), applied once the jobs are gone."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import select

from app.domain.config import GpuqConfig
from app.domain.errors import Conflict
from app.store.config_loader import apply_managed_config
from app.store.orm import JobRow
from tests.integration.conftest import job_body


def _running(client, admin, dispatcher, session_factory, **resources) -> int:
    body = job_body("big", resources=resources)
    r = client.post("/v1/jobs", json=body, headers=admin)
    assert r.status_code == 201, r.text
    dispatcher.run_once()
    with session_factory() as s:
        job = s.get(JobRow, r.json()["id"])
        assert job.status in ("admitted", "running"), job.reason
    return job.id


def _node_of(client, admin, job_id: int) -> str:
    return client.get(f"/v1/jobs/{job_id}", headers=admin).json()["allocations"][0]["node"]


def test_cards_and_type_cannot_change_under_a_running_job(
    client, admin, dispatcher, session_factory
):
    jid = _running(client, admin, dispatcher, session_factory, gpus=8, gpu_types=["v100-16g"])
    node = _node_of(client, admin, jid)
    for patch, field in (({"gpus": 4}, "gpus"), ({"gpu_type": "a100-80g"}, "gpu_type")):
        r = client.patch(f"/v1/nodes/{node}", json=patch, headers=admin)
        assert r.status_code == 409, (patch, r.text)
        assert str(jid) in r.json()["detail"] and field in r.json()["detail"]
    assert client.get(f"/v1/nodes/{node}", headers=admin).json()["gpus"] == 8
    # a change that keeps every held card goes through while the job runs
    r = client.patch(f"/v1/nodes/{node}", json={"gpus": 10, "rack": "r9"}, headers=admin)
    assert r.status_code == 200, r.text
    # another job waits; passes keep succeeding
    small = client.post("/v1/jobs", json=job_body("small", resources={"gpus": 1}),
                        headers=admin).json()["id"]
    dispatcher.run_once()
    dispatcher.run_once()
    # drained: the change applies
    for j in (jid, small):
        assert client.post(f"/v1/jobs/{j}/cancel", headers=admin).status_code == 200
    dispatcher.run_once()
    dispatcher.run_once()
    r = client.patch(f"/v1/nodes/{node}", json={"gpus": 4}, headers=admin)
    assert r.status_code == 200, r.text


def test_mig_layout_cannot_drop_a_held_slice(client, admin, dispatcher, session_factory):
    jid = _running(client, admin, dispatcher, session_factory, mig="3g.40gb")
    assert _node_of(client, admin, jid) == "a100-0"
    r = client.patch("/v1/nodes/a100-0", json={"mig_layout": ["2g.20gb", "2g.20gb"]},
                     headers=admin)
    assert r.status_code == 409 and str(jid) in r.json()["detail"], r.text
    assert "mig_layout" in r.json()["detail"]
    r = client.patch("/v1/nodes/a100-0", json={"gpus": 1}, headers=admin)
    assert r.status_code == 200, r.text  # the slice's card stays
    dispatcher.run_once()


def test_config_apply_cannot_strand_a_running_job(client, admin, dispatcher, session_factory):
    jid = _running(client, admin, dispatcher, session_factory, gpus=8, gpu_types=["v100-16g"])
    node = _node_of(client, admin, jid)
    cfg = GpuqConfig.model_validate({
        "gpu_types": [{"name": "v100-16g", "memory_gb": 16, "weight": 4}],
        "nodes": [{"name": node, "gpu_type": "v100-16g", "gpus": 2, "cpu": 64,
                   "memory_gb": 512}],
    })
    with session_factory() as s, pytest.raises(Conflict, match=str(jid)):
        apply_managed_config(s, cfg, "f.yaml", actor="config:f.yaml", at=datetime.now(UTC))
    with session_factory() as s:
        assert s.scalar(select(JobRow.status).where(JobRow.id == jid)) in ("admitted", "running")
