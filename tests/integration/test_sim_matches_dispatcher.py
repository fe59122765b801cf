"""The simulator and the live dispatcher take the same decisions on the same workload.

The same scenario runs twice: through ``gpuq simulate``'s replay (virtual
time) and through the real dispatcher (PostgreSQL, REST submissions, the
simulated cluster on a manual clock stepped second by second). Every job
must start after the same wait, on the same node, cards and share.
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
from app.simulate.all_policies import POLICIES
from app.simulate.replay import ScenarioModel, Simulator, to_json
from app.store.config_loader import apply_config, ensure_priority_classes
from app.store.convert import node_info
from app.store.orm import NodeRow
from tests.integration.conftest import ADMIN_TOKEN

SCENARIO = """
gpu_types:
  - {name: a100-80g, memory_gb: 80, weight: 10}
  - {name: v100-16g, memory_gb: 16, weight: 4}
  - {name: rtx4090-24g, memory_gb: 24, weight: 2, shareable: true}
nodes:
  - {name: a100, count: 1, gpu_type: a100-80g, gpus: 4, cpu: 64, memory_gb: 512}
  - {name: v100, count: 2, gpu_type: v100-16g, gpus: 2, cpu: 32, memory_gb: 256}
  - {name: rtx, count: 1, gpu_type: rtx4090-24g, gpus: 2, cpu: 32, memory_gb: 256}
pools:
  - {name: shared}
teams:
  - {name: nlp, pool: shared}
  - {name: vision, pool: shared}
scheduler: {cpu_jobs_on_gpu_nodes: true}  # no CPU-only node: the cpu-only job uses a GPU node
jobs:
  - {name: big, team: nlp, submit_at_s: 1, duration_estimate_s: 20,
     resources: {gpus: 4, min_gpu_memory_gb: 40}}
  - {name: mem40, team: vision, submit_at_s: 2, duration_estimate_s: 10,
     resources: {gpus: 1, min_gpu_memory_gb: 40}}
  - {name: pair, team: vision, submit_at_s: 3, duration_estimate_s: 15, resources: {gpus: 2}}
  - {name: share-a, team: nlp, submit_at_s: 4, duration_estimate_s: 12,
     resources: {gpu_share: 0.5}}
  - {name: share-b, team: vision, submit_at_s: 5, duration_estimate_s: 9,
     resources: {gpu_share: 0.25}}
  - {name: one, team: nlp, submit_at_s: 6, duration_estimate_s: 7, resources: {gpus: 1}}
  - {name: cpu-only, team: vision, submit_at_s: 7, duration_estimate_s: 5,
     resources: {gpus: 0, cpu: 8}}
  - {name: four, team: vision, submit_at_s: 8, duration_estimate_s: 6, resources: {gpus: 4}}
  - {name: late, team: nlp, submit_at_s: 9, duration_estimate_s: 4,
     resources: {gpus: 2, gpu_types: [v100-16g]}}
"""
HORIZON_S = 60


def _alloc_key(allocs):
    return sorted((a["node"], a["gpu_type"], tuple(a["gpus"])) for a in allocs)


@pytest.mark.parametrize("policy", ["gpuq", "fifo-typed"])
def test_same_decisions(policy, settings, engine, session_factory, clock):
    cfg = load_config_text(SCENARIO)
    sim = to_json(Simulator(ScenarioModel.from_config(cfg), POLICIES[policy], policy).run())
    expected = {
        j["name"]: (j["wait_s"], _alloc_key(j["allocations"]), j["status"]) for j in sim["jobs"]
    }
    assert all(s == "succeeded" for _, _, s in expected.values())

    with session_factory() as s:
        ensure_priority_classes(s)
        apply_config(s, cfg)
        s.commit()
        nodes = [node_info(r) for r in s.scalars(select(NodeRow))]
    cluster = SimulatedCluster(nodes=nodes, clock=clock, speed=1.0)
    dispatcher = Dispatcher(session_factory, cluster, clock=clock, policy=policy)
    services = Services(settings=settings, engine=engine, session_factory=session_factory,
                        cluster=cluster, clock=clock, admin_token=ADMIN_TOKEN)
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    by_time: dict[int, list[dict]] = {}
    for j in cfg.jobs:
        body = j.model_dump(exclude_none=True, exclude={"submit_at_s", "runtime_s", "speed"})
        by_time.setdefault(int(j.submit_at_s), []).append(body)
    seen: dict[str, tuple] = {}
    ids: dict[str, str] = {}
    with TestClient(create_app(services=services)) as client:
        for t in range(HORIZON_S + 1):
            for body in by_time.get(t, []):
                r = client.post("/v1/jobs", json=body, headers=admin)
                assert r.status_code == 201, r.text
                ids[body["name"]] = r.json()["id"]
            dispatcher.run_once()
            for name, jid in ids.items():
                if name in seen:
                    continue
                j = client.get(f"/v1/jobs/{jid}", headers=admin).json()
                if j["status"] in ("admitted", "running"):
                    seen[name] = (j["wait_seconds"], _alloc_key(j["allocations"]))
            clock.advance(1)
        final = {n: client.get(f"/v1/jobs/{i}", headers=admin).json()["status"]
                 for n, i in ids.items()}
    assert all(s == "succeeded" for s in final.values()), final
    live = {name: (w, a) for name, (w, a) in seen.items()}
    assert live == {name: (w, a) for name, (w, a, _) in expected.items()}
