"""Cordon, uncordon and drain are operational state, not configuration: they work on
every node whoever defined it (a config file's node answered 409 "managed by the config
file" to ``PATCH /v1/nodes/a100-0 {"schedulable": false}``), are audited, and survive a
config apply; a drain stops and requeues what runs there."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select

from app.dispatch.drain import Drainer
from app.domain.config import GpuqConfig
from app.runtime import load_settings_config
from app.store.config_loader import apply_managed_config
from app.store.orm import JobRow
from tests.integration.conftest import job_body


def _manage_demo(session_factory, settings) -> None:
    """The demo config applied as THE config file: its nodes are managed by it."""
    with session_factory() as s:
        apply_managed_config(s, load_settings_config(settings), "demo.yaml",
                             actor="config:demo.yaml", at=datetime.now(UTC))
        s.commit()


def _status(session_factory, jid) -> str:
    with session_factory() as s:
        return s.scalar(select(JobRow.status).where(JobRow.id == int(jid)))


def test_patch_schedulable_cordons_a_config_node(client, admin, session_factory, settings):
    _manage_demo(session_factory, settings)
    # a definition change is still the file's
    r = client.patch("/v1/nodes/a100-0", json={"rack": "r9"}, headers=admin)
    assert r.status_code == 409 and "config file" in r.json()["detail"], r.text
    r = client.patch("/v1/nodes/a100-0", json={"schedulable": False}, headers=admin)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["schedulable"] is False and body["cordon"]["by"] == "token:admin", body
    audit = client.get("/v1/audit", params={"kind": "node", "name": "a100-0"},
                       headers=admin).json()
    items = audit["items"] if isinstance(audit, dict) else audit
    assert items[0]["action"] == "cordon", items[:1]
    r = client.patch("/v1/nodes/a100-0", json={"schedulable": True}, headers=admin)
    assert r.status_code == 200 and r.json()["schedulable"] is True and r.json()["cordon"] is None


def test_cordon_survives_a_config_apply_and_keeps_new_jobs_off(
    client, admin, dispatcher, session_factory, settings
):
    _manage_demo(session_factory, settings)
    for n in ("a100-0", "a100-1"):
        r = client.post(f"/v1/nodes/{n}/cordon", json={"reason": "firmware"}, headers=admin)
        assert r.status_code == 200 and r.json()["cordon"]["reason"] == "firmware", r.text
    _manage_demo(session_factory, settings)  # the file says schedulable: true
    for n in ("a100-0", "a100-1"):
        node = client.get(f"/v1/nodes/{n}", headers=admin).json()
        assert node["schedulable"] is False and node["cordon"]["reason"] == "firmware", node
    jid = client.post("/v1/jobs", json=job_body(resources={"gpus": 1,
                                                           "gpu_types": ["a100-80g"]}),
                      headers=admin).json()["id"]
    dispatcher.run_once()
    assert _status(session_factory, jid) == "pending"
    for n in ("a100-0", "a100-1"):
        assert client.post(f"/v1/nodes/{n}/uncordon", headers=admin).status_code == 200
    dispatcher.run_once()
    assert _status(session_factory, jid) in ("admitted", "running")


def test_drain_requeues_the_jobs_there(client, admin, dispatcher, session_factory):
    r = client.post("/v1/jobs", json=job_body(resources={"gpus": 8,
                                                         "gpu_types": ["v100-16g"]}),
                    headers=admin)
    jid = r.json()["id"]
    dispatcher.run_once()
    node = client.get(f"/v1/jobs/{jid}", headers=admin).json()["allocations"][0]["node"]
    drainer = Drainer(dispatcher)
    drainer.run_once()  # nothing is draining: nothing stops
    assert _status(session_factory, jid) in ("admitted", "running")
    r = client.post(f"/v1/nodes/{node}/drain", json={"reason": "PSU"}, headers=admin)
    assert r.status_code == 200 and r.json()["cordon"]["drain"] is True, r.text
    drainer.run_once()
    assert _status(session_factory, jid) == "pending"
    events = client.get(f"/v1/jobs/{jid}/events", headers=admin).json()
    items = events["items"] if isinstance(events, dict) else events
    assert any(f"node {node} is being drained" in (e.get("reason") or "") for e in items), items
    dispatcher.run_once()  # back on the other V100 node, never the drained one
    job = client.get(f"/v1/jobs/{jid}", headers=admin).json()
    assert job["status"] in ("admitted", "running"), job
    assert {a["node"] for a in job["allocations"]} != {node}


def test_cordon_needs_admin_and_an_existing_node(client, admin, team_token):
    r = client.post("/v1/nodes/a100-0/cordon", headers=team_token("nlp"))
    assert r.status_code == 403, r.text
    r = client.post("/v1/nodes/a100-9/cordon", headers=admin)
    assert r.status_code == 404, r.text
    r = client.post("/v1/nodes/a100-0/cordon", json={"why": "x"}, headers=admin)
    assert r.status_code == 422, r.text


def test_a_file_node_stays_cordoned_when_the_file_changes(client, admin, session_factory):
    cfg = GpuqConfig.model_validate({
        "gpu_types": [{"name": "v100-16g", "memory_gb": 16, "weight": 4}],
        "nodes": [{"name": "v100-9", "gpu_type": "v100-16g", "gpus": 2, "cpu": 64,
                   "memory_gb": 512}],
    })
    with session_factory() as s:
        apply_managed_config(s, cfg, "f.yaml", actor="config:f.yaml", at=datetime.now(UTC))
        s.commit()
    assert client.post("/v1/nodes/v100-9/cordon", headers=admin).status_code == 200
    cfg.nodes[0].gpus = 4
    with session_factory() as s:
        apply_managed_config(s, cfg, "f.yaml", actor="config:f.yaml", at=datetime.now(UTC))
        s.commit()
    node = client.get("/v1/nodes/v100-9", headers=admin).json()
    assert node["gpus"] == 4 and node["schedulable"] is False and node["cordon"], node
