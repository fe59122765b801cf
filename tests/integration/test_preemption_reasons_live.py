"""What users read about a preempted gang, through the dispatcher on PostgreSQL
and the API (`GET /v1/jobs/{id}`, its events, `GET /v1/queue`).

One A100 node and one V100 node: a P2 gang of 2 x 4 cards (any type) runs on
the A100 node; a P0 job of 4 A100 cards preempts it. The ``preempted`` event
says so once (it used to read "preempted by job 3: preempted by job 3 (P0 >
P2)"); the job's reason shows the same sentence until the next cycle, which
then says why the gang waits now: a 4-card block is free on each node, but a
gang does not mix GPU types (it used to read "free GPU blocks exist ... but not
with 1 CPU and 1 GB memory free on the same node", never the reason).
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.cluster.simulated import SimulatedCluster
from app.dispatch.dispatcher import Dispatcher
from app.domain.config import load_config_text
from app.main import create_app
from app.runtime import Services
from app.store.config_loader import apply_config, ensure_priority_classes
from app.store.convert import node_info
from app.store.orm import NodeRow
from tests.integration.conftest import ADMIN_TOKEN

CONFIG = """
gpu_types:
  - {name: a100-80g, memory_gb: 80, weight: 10}
  - {name: v100-16g, memory_gb: 16, weight: 4}
nodes:
  - {name: a100, gpu_type: a100-80g, gpus: 8, cpu: 128, memory_gb: 1024, network: ib}
  - {name: v100, gpu_type: v100-16g, gpus: 8, cpu: 128, memory_gb: 1024, network: ib}
pools:
  - {name: main, gpu_types: [a100-80g, v100-16g]}
teams:
  - {name: low, pool: main, default_priority: P2}
  - {name: high, pool: main, default_priority: P0}
priority_classes:
  - {name: P0, value: 1000, preemptible: false}
  - {name: P1, value: 500, preemptible: true}
  - {name: P2, value: 100, preemptible: true}
scheduler: {min_run_time_s: 60}
"""


@pytest.fixture
def env(settings, engine, session_factory, clock):
    with session_factory() as s:
        ensure_priority_classes(s)
        apply_config(s, load_config_text(CONFIG))
        s.commit()
        nodes = [node_info(r) for r in s.scalars(select(NodeRow))]
    cluster = SimulatedCluster(nodes=nodes, clock=clock)
    services = Services(settings=settings, engine=engine, session_factory=session_factory,
                        cluster=cluster, clock=clock, admin_token=ADMIN_TOKEN)
    with TestClient(create_app(services=services)) as client:
        yield client, Dispatcher(session_factory, cluster, clock=clock)


def _submit(client, admin, name, team, resources, **kw) -> str:
    body = {"name": name, "team": team, "resources": resources,
            "duration_estimate_s": 100_000, **kw}
    r = client.post("/v1/jobs", json=body, headers=admin)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_preempted_gang_event_says_it_once_then_reason_says_why_it_waits(
    env, admin, clock
) -> None:
    client, d = env
    gang = _submit(client, admin, "gang", "low", {"gpus": 4}, replicas=2, min_available=2)
    _submit(client, admin, "fill", "low", {"gpus": 4, "gpu_types": ["v100-16g"]})
    d.run_once()
    job = client.get(f"/v1/jobs/{gang}", headers=admin).json()
    assert job["status"] == "running"
    assert {a["node"] for a in job["allocations"]} == {"a100"}
    clock.advance(120)  # past the minimum run time
    p0 = _submit(client, admin, "urgent", "high", {"gpus": 4, "gpu_types": ["a100-80g"]})
    d.run_once()
    assert client.get(f"/v1/jobs/{p0}", headers=admin).json()["status"] == "running"
    events = client.get(f"/v1/jobs/{gang}/events", headers=admin).json()
    pre = [e for e in events if e["type"] == "preempted"]
    said = f"preempted by job {p0} (P0 > P2)"
    assert [e["reason"] for e in pre] == [said]  # one event, the preemptor named once
    assert pre[0]["data"]["by_job"] == p0
    job = client.get(f"/v1/jobs/{gang}", headers=admin).json()
    assert (job["status"], job["reason"], job["preemption_count"]) == ("pending", said, 1)

    clock.advance(1)
    d.run_once()  # the next cycle explains the wait
    why = client.get(f"/v1/jobs/{gang}", headers=admin).json()["reason"]
    # A requeued gang is promoted: it holds a reservation, and the reason still says what
    # it needs and why that is not free now.
    assert why.startswith("waiting for reservation: capacity held on 1 node(s) (v100)")
    assert "needs 2 replicas x 4 x a100-80g|v100-16g per replica;" in why
    assert "free 4-card blocks of one GPU type: at most 1 of 2 needed " \
           "(a100-80g 1, v100-16g 1; a gang does not mix types" in why
    assert "CPU" not in why and "preempted" not in why
    [row] = [q for q in client.get("/v1/queue", headers=admin).json() if q["id"] == gang]
    assert row["reason"] == why
    assert [e["type"] for e in client.get(f"/v1/jobs/{gang}/events", headers=admin).json()
            ].count("preempted") == 1


def test_a_team_reads_that_another_teams_job_preempted_it_not_which(env, admin, clock) -> None:
    """The preempted team read the preemptor's id in its job's reason, its event's reason
    and ``data.by_job``, the queue and the dashboard, while GET /v1/nodes hides which other
    team's job holds a card. Its own jobs' ids stay; the admin reads every id."""
    client, d = env
    low = {"Authorization": "Bearer " + client.post(
        "/v1/teams/low/tokens", headers=admin).json()["token"]}
    gang = _submit(client, admin, "gang", "low", {"gpus": 4}, replicas=2, min_available=2)
    _submit(client, admin, "fill", "low", {"gpus": 4, "gpu_types": ["v100-16g"]})
    d.run_once()
    clock.advance(120)
    p0 = _submit(client, admin, "urgent", "high", {"gpus": 4, "gpu_types": ["a100-80g"]})
    d.run_once()
    said = f"preempted by job {p0} (P0 > P2)"
    assert client.get(f"/v1/jobs/{gang}", headers=admin).json()["reason"] == said
    redacted = "preempted by another team's job (P0 > P2)"
    assert client.get(f"/v1/jobs/{gang}", headers=low).json()["reason"] == redacted
    [item] = [j for j in client.get("/v1/jobs", headers=low).json()["items"] if j["id"] == gang]
    assert item["reason"] == redacted
    [q] = [q for q in client.get("/v1/queue", headers=low).json() if q["id"] == gang]
    assert q["reason"] == redacted
    [pre] = [e for e in client.get(f"/v1/jobs/{gang}/events", headers=low).json()
             if e["type"] == "preempted"]
    assert (pre["reason"], pre["data"]["by_job"]) == (redacted, None)
    [pre] = [e for e in client.get(f"/v1/jobs/{gang}/events", headers=admin).json()
             if e["type"] == "preempted"]
    assert (pre["reason"], pre["data"]["by_job"]) == (said, p0)
    for page in (f"/ui/jobs/{gang}", "/ui/jobs", "/ui/queue"):
        html = client.get(page, headers=low).text
        assert "another team&#39;s job" in html and f"job {p0}" not in html, page
    assert f"job {p0}" in client.get(f"/ui/jobs/{gang}", headers=admin).text
