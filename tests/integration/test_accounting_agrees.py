"""One live-allocation definition (app/store/live_allocations.py): pool usage, team usage,
the core's pool ledger and /metrics give the same numbers on a cluster with
running, releasing and borrowed allocations.

The cluster: a training job running on one A100 card; a training job moved
by a cycle (preempted and admitted anew on the other node) whose old Pods are
still stopping, so it has one live and one releasing row (the case that once
showed ``used=10`` beside ``idle=80``); an inference job that borrowed A100
CU beyond its pool's guarantee (an active lease).
"""

from __future__ import annotations

from collections import defaultdict

from prometheus_client.parser import text_string_to_metric_families

from app.scheduling.model import Admission, CycleResult, Preemption, ReplicaPlacement
from app.scheduling.pools import PoolLedger
from app.store.pool_ledger import ledger_from_db
from app.store.snapshot import build_snapshot
from tests.integration.conftest import ADMIN_TOKEN, job_body

A100 = "a100-80g"


def _submit(client, admin, name, team, gpus, **kw) -> str:
    body = job_body(name=name, team=team, resources={"gpus": gpus, "gpu_types": [A100]},
                    duration_estimate_s=10_000, **kw)
    r = client.post("/v1/jobs", json=body, headers=admin)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _move(job_id: str, node: str, device: int):
    """A cycle that preempts ``job_id`` and admits it anew on ``node``'s ``device``."""

    def decide(snap):
        (held,) = [j for j in snap.running if j.request.id == job_id]
        (p,) = held.placements
        moved = ReplicaPlacement(
            replica=p.replica, node=node, gpu_type=p.gpu_type, devices=(device,),
            units=p.units, cpu=p.cpu, memory_gb=p.memory_gb,
        )
        return CycleResult(
            preemptions=[Preemption(job_id, "test move", by_job=None)],
            admissions=[Admission(job_id, (moved,))],
        )

    return decide


def _metric(text: str, name: str) -> dict[tuple, float]:
    out: dict[tuple, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_usage_ledger_and_metrics_agree(client, admin, dispatcher, cluster, clock,
                                        session_factory):
    cluster.stop_delay_s = 60  # stopped Pods keep their cards for a minute
    steady = _submit(client, admin, "steady", "nlp", 1)
    mover = _submit(client, admin, "mover", "nlp", 1)
    borrower = _submit(client, admin, "borrower", "recsys", 4, pool="inference",
                       priority="P1")
    dispatcher.run_once()
    for jid in (steady, mover, borrower):
        assert client.get(f"/v1/jobs/{jid}", headers=admin).json()["status"] == "running"
    free = client.get("/v1/nodes/a100-1", headers=admin).json()["free"]["devices"]
    target = "a100-1" if free else "a100-0"
    device = (free or client.get("/v1/nodes/a100-0", headers=admin)
              .json()["free"]["devices"])[-1]
    dispatcher.run_with(_move(mover, target, device))
    clock.advance(5)
    dispatcher.run_once()  # the old Pods are still stopping: their row stays releasing

    node_rows = [
        (a["job_id"], a["releasing"])
        for n in client.get("/v1/nodes", headers=admin).json()
        for a in n["allocations"]
    ]
    assert (mover, True) in node_rows and (mover, False) in node_rows  # one live, one releasing
    leases = client.get("/v1/leases?state=active", headers=admin).json()
    assert any(x["job_id"] == borrower for x in leases), leases

    pools = [p["name"] for p in client.get("/v1/pools", headers=admin).json()]
    usage = {p: client.get(f"/v1/pools/{p}/usage", headers=admin).json() for p in pools}
    teams = [t["name"] for t in client.get("/v1/teams", headers=admin).json()]
    team_used: dict[str, float] = defaultdict(float)
    for t in teams:
        for gpu_type, cu in client.get(f"/v1/teams/{t}/usage", headers=admin).json()[
            "used_by_type"
        ].items():
            team_used[gpu_type] += cu
    with session_factory() as s:
        core = PoolLedger.from_snapshot(build_snapshot(s, clock()).snapshot)
        read_ledger = ledger_from_db(s)

    # the moved job counts once, at its live row: 1 card each for the two nlp jobs
    assert usage["training"]["gpu_types"][A100]["used"] == 20.0
    for p in pools:
        for t, row in usage[p]["gpu_types"].items():
            for ledger in (core, read_ledger):
                assert row["used"] == ledger.used.get((p, t), 0.0), (p, t)
                assert row["borrowed"] == ledger.borrowed.get((p, t), 0.0), (p, t)
                assert row["lent"] == ledger.lent.get((p, t), 0.0), (p, t)
                assert row["idle"] == ledger.idle(p, t), (p, t)
                assert row["shared"] == ledger.shared_used(p, t), (p, t)
            # idle is what the guarantee leaves after own use and loans
            own = min(row["guaranteed_effective"] - row["lent"], row["used"] - row["borrowed"])
            assert row["idle"] == max(0.0, row["guaranteed_effective"] - max(0.0, own)
                                      - row["lent"]), (p, t, row)
    training = usage["training"]["gpu_types"][A100]
    assert training["idle"] == training["guaranteed_effective"] - 20.0 - training["lent"]

    pool_used: dict[str, float] = defaultdict(float)
    for p in pools:
        for t, row in usage[p]["gpu_types"].items():
            pool_used[t] += row["used"]
    assert {t: v for t, v in pool_used.items() if v} == dict(team_used)

    text = client.get("/metrics", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}).text
    allocated = {dict(k)["gpu_type"]: v for k, v in
                 _metric(text, "gpuq_gpu_allocated_units").items()}
    assert {t: v for t, v in allocated.items() if v} == dict(team_used)
    releasing = {dict(k)["gpu_type"]: v for k, v in
                 _metric(text, "gpuq_releasing_units").items()}
    assert releasing == {A100: 10.0}
    borrowed = _metric(text, "gpuq_borrowed_units")
    per_borrower: dict[str, float] = defaultdict(float)
    for k, v in borrowed.items():
        per_borrower[dict(k)["borrower"]] += v
    for p in pools:
        assert per_borrower.get(p, 0.0) == usage[p]["total"]["borrowed"], p
    assert usage["inference"]["total"]["borrowed"] > 0
