"""GPU types, nodes, pools, teams, priority classes, usage, leases, health, docs."""

from __future__ import annotations

from datetime import timedelta

from app.store.orm import JobRow, LeaseRow
from tests.integration.conftest import job_body


def test_health_ready_docs_open_without_token(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready", "schema": "schema current"}
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    for p in [
        "/v1/jobs",
        "/v1/jobs/{job_id}/events",
        "/v1/pools/{name}/usage",
        "/v1/queue",
        "/v1/leases",
        "/v1/teams/{name}/tokens",
        "/v1/teams/{name}/quota",
    ]:
        assert p in paths


def test_gpu_types_crud(client, admin, team_token):
    names = [t["name"] for t in client.get("/v1/gpu-types", headers=admin).json()]
    assert names == ["a100-80g", "rtx4090-24g", "v100-16g"]
    a100 = client.get("/v1/gpu-types/a100-80g", headers=admin).json()
    assert a100["weight"] == 10 and "3g.40gb" in a100["mig_profiles"]
    body = {"name": "h100-80g", "memory_gb": 80, "weight": 16}
    assert client.post("/v1/gpu-types", json=body, headers=team_token("nlp")).status_code == 403
    assert client.post("/v1/gpu-types", json=body, headers=admin).status_code == 201
    assert client.post("/v1/gpu-types", json=body, headers=admin).status_code == 409
    r = client.patch("/v1/gpu-types/h100-80g", json={"weight": 18}, headers=admin)
    assert r.status_code == 200 and r.json()["weight"] == 18
    assert r.json()["speed"] == 1.0  # the operator's speed per type: 1.0 unless measured
    r = client.patch("/v1/gpu-types/h100-80g", json={"speed": 3.1}, headers=admin)
    assert r.status_code == 200 and r.json()["speed"] == 3.1
    r = client.patch("/v1/gpu-types/h100-80g", json={"speed": 0}, headers=admin)
    assert r.status_code == 422 and r.json()["detail"].startswith("speed")
    r = client.patch("/v1/gpu-types/h100-80g", json={"name": "x"}, headers=admin)
    assert r.status_code == 422 and r.json()["detail"].startswith("name")
    r = client.patch("/v1/gpu-types/h100-80g", json={"weight": -1}, headers=admin)
    assert r.status_code == 422 and r.json()["detail"].startswith("weight")
    # in use by nodes: refused
    r = client.delete("/v1/gpu-types/a100-80g", headers=admin)
    assert r.status_code == 409 and "node 'a100-0'" in r.json()["detail"]
    assert client.delete("/v1/gpu-types/h100-80g", headers=admin).status_code == 204
    assert client.get("/v1/gpu-types/h100-80g", headers=admin).status_code == 404


def test_nodes_show_free_capacity_and_crud(client, admin, dispatcher):
    nodes = {n["name"]: n for n in client.get("/v1/nodes", headers=admin).json()}
    assert len(nodes) == 8
    assert nodes["cpu-0"]["gpus"] == 0 and nodes["cpu-0"]["gpu_type"] is None
    a0 = nodes["a100-0"]
    assert a0["network"] == "ib" and a0["gpus"] == 8
    assert a0["free"]["gpus"] == 7  # device 0 is cut into MIG slices
    assert [s["profile"] for s in a0["free"]["mig_slices"]] == ["3g.40gb", "2g.20gb", "2g.20gb"]
    assert nodes["rtx4090-2"]["network"] == "eth"
    client.post("/v1/jobs", json=job_body(), headers=admin)
    dispatcher.run_once()
    # either A100 may take the 2-card job (the scores weigh the MIG-carved a100-0's
    # 7 whole cards against a100-1's 8); its free capacity drops by what it took
    after = {n: client.get(f"/v1/nodes/{n}", headers=admin).json() for n in ("a100-0", "a100-1")}
    used = [n for n, v in after.items() if v["allocations"]]
    assert len(used) == 1 and len(after[used[0]]["allocations"]) == 1
    assert after[used[0]]["free"]["gpus"] == nodes[used[0]]["free"]["gpus"] - 2
    assert after[used[0]]["free"]["cpu"] == nodes[used[0]]["free"]["cpu"] - 1
    body = {"name": "v100-9", "gpu_type": "v100-16g", "gpus": 4, "cpu": 32, "memory_gb": 128}
    assert client.post("/v1/nodes", json=body, headers=admin).status_code == 201
    r = client.patch("/v1/nodes/v100-9", json={"schedulable": False}, headers=admin)
    assert r.status_code == 200 and r.json()["schedulable"] is False
    r = client.delete(f"/v1/nodes/{used[0]}", headers=admin)
    assert r.status_code == 409 and "allocations" in r.json()["detail"]
    assert client.delete("/v1/nodes/v100-9", headers=admin).status_code == 204


def test_nodes_are_read_only_on_kubernetes(client, admin, settings):
    settings.cluster = "kubernetes"
    body = {"name": "n9", "gpus": 0}
    r = client.post("/v1/nodes", json=body, headers=admin)
    assert r.status_code == 409 and r.json()["detail"].startswith("cluster")


def test_pools_crud_and_usage(client, admin, session_factory, dispatcher, clock):
    assert [p["name"] for p in client.get("/v1/pools", headers=admin).json()] == [
        "inference",
        "mixed",
        "training",
    ]
    body = {"name": "batch", "gpu_types": ["v100-16g"], "guaranteed": {"v100-16g": 8}}
    assert client.post("/v1/pools", json=body, headers=admin).status_code == 201
    r = client.patch("/v1/pools/batch", json={"reclaim": "when_needed"}, headers=admin)
    assert r.json()["reclaim"] == "when_needed"
    assert client.delete("/v1/pools/batch", headers=admin).status_code == 204
    r = client.delete("/v1/pools/training", headers=admin)
    assert r.status_code == 409 and "team 'nlp' (pool)" in r.json()["detail"]

    j = client.post("/v1/jobs", json=job_body(), headers=admin).json()
    client.post("/v1/jobs", json=job_body("big", resources={"gpus": 9}), headers=admin)
    client.post("/v1/jobs", json=job_body("w"), headers=admin)
    dispatcher.run_once()
    # a lease row (as a borrowing admission writes it) shows as borrowed/lent
    with session_factory() as s:
        s.add(
            LeaseRow(
                borrower="training",
                lender="mixed",
                gpu_type="a100-80g",
                units=20,
                job_id=int(j["id"]),
                started_at=clock(),
                expires_at=clock() + timedelta(seconds=1800),
                state="active",
            )
        )
        s.commit()
    u = client.get("/v1/pools/training/usage", headers=admin).json()
    assert u["gpu_types"]["a100-80g"].items() >= {
        "guaranteed": 100,
        "used": 40.0,
        "borrowed": 20.0,
        "lent": 0.0,
    }.items()
    assert u["pending"] == 0
    m = client.get("/v1/pools/mixed/usage", headers=admin).json()
    assert m["gpu_types"]["a100-80g"]["lent"] == 20.0
    leases = client.get("/v1/leases", params={"state": "active"}, headers=admin).json()
    assert len(leases) == 1 and leases[0]["job_id"] == j["id"]
    assert set(leases[0]) >= {
        "id",
        "borrower",
        "lender",
        "gpu_type",
        "units",
        "job_id",
        "started_at",
        "expires_at",
        "state",
    }
    job = client.get(f"/v1/jobs/{j['id']}", headers=admin).json()
    assert job["lease"]["lender"] == "mixed"
    listed = {i["id"]: i for i in client.get("/v1/jobs", headers=admin).json()["items"]}
    assert listed[j["id"]]["lease"]["id"] == job["lease"]["id"]
    assert client.get("/v1/leases", params={"state": "returned"}, headers=admin).json() == []
    assert client.get("/v1/leases", params={"state": "bogus"}, headers=admin).status_code == 422


def test_teams_quota_usage_tokens(client, admin, team_token, dispatcher):
    assert [t["name"] for t in client.get("/v1/teams", headers=admin).json()] == [
        "nlp",
        "recsys",
        "research",
    ]
    body = {"name": "vision", "pool": "inference", "allowed_pools": ["mixed"]}
    assert client.post("/v1/teams", json=body, headers=admin).status_code == 201
    r = client.put(
        "/v1/teams/vision/quota",
        json={"quota_units": 50, "quota_by_type": {"a100-80g": 20}},
        headers=admin,
    )
    assert r.status_code == 200 and r.json()["quota_units"] == 50
    r = client.put(
        "/v1/teams/vision/quota",
        json={"quota_units": 50, "quota_by_type": {"h100": 5}},
        headers=admin,
    )
    assert r.status_code == 422 and "quota_by_type" in r.json()["detail"]
    r = client.put(
        "/v1/teams/vision/quota", json={"quota_units": -1, "quota_by_type": {}}, headers=admin
    )
    assert r.status_code == 422 and "quota_units" in r.json()["detail"]
    assert client.get("/v1/teams/vision", headers=admin).json()["quota_units"] == 50
    r = client.patch("/v1/teams/vision", json={"weight": 3}, headers=admin)
    assert r.json()["weight"] == 3
    vision = team_token("vision")
    assert (
        client.put(
            "/v1/teams/vision/quota",
            json={"quota_units": 999, "quota_by_type": {}},
            headers=vision,
        ).status_code
        == 403
    )
    assert client.post("/v1/teams/vision/tokens", headers=vision).status_code == 403
    client.post("/v1/jobs", json=job_body("v", "vision", pool="mixed"), headers=vision)
    dispatcher.run_once()
    u = client.get("/v1/teams/vision/usage", headers=vision).json()
    assert u["used_units"] == 20.0 and u["used_by_type"] == {"a100-80g": 20.0}
    assert client.get("/v1/teams/nlp/usage", headers=vision).status_code == 403
    r = client.delete("/v1/teams/vision", headers=admin)
    assert r.status_code == 409 and "job " in r.json()["detail"]
    assert client.post("/v1/teams/nobody/tokens", headers=admin).status_code == 404


def test_priority_classes(client, admin, team_token):
    got = client.get("/v1/priority-classes", headers=admin).json()
    assert [p["name"] for p in got] == ["P0", "P1", "P2"]
    assert got[0]["preemptible"] is False
    body = {"name": "P3", "value": 10, "preemptible": True}
    assert (
        client.post("/v1/priority-classes", json=body, headers=team_token("nlp")).status_code == 403
    )
    assert client.post("/v1/priority-classes", json=body, headers=admin).status_code == 201
    assert client.post("/v1/priority-classes", json=body, headers=admin).status_code == 409
    r = client.post("/v1/jobs", json=job_body(priority="P3"), headers=admin)
    assert r.status_code == 201 and r.json()["priority"] == "P3"


def test_queue_in_dispatch_order(client, admin, team_token, dispatcher, clock, session_factory):
    nlp = team_token("nlp")
    # fill the A100s (a100-0 has 7 whole cards, device 0 is cut into MIG slices)
    client.post(
        "/v1/jobs",
        json=job_body("fill0", resources={"gpus": 8, "gpu_types": ["a100-80g"]}),
        headers=admin,
    )
    # (nlp, not the P0 team recsys: a P0 job never borrows beyond its pool's guarantee)
    client.post(
        "/v1/jobs",
        json=job_body("fill1", resources={"gpus": 7, "gpu_types": ["a100-80g"]}),
        headers=admin,
    )
    dispatcher.run_once()
    with session_factory() as s:
        assert s.query(JobRow).filter(JobRow.status == "running").count() == 2
    low = client.post("/v1/jobs", json=job_body("low", priority="P2"), headers=nlp).json()
    clock.advance(5)
    high = client.post("/v1/jobs", json=job_body("high", priority="P0"), headers=nlp).json()
    clock.advance(5)
    dispatcher.run_once()
    q = client.get("/v1/queue", headers=nlp).json()
    ids = [item["id"] for item in q]
    assert ids.index(high["id"]) < ids.index(low["id"])
    assert q[0]["position"] == 1
    low_item = next(i for i in q if i["id"] == low["id"])
    assert low_item["wait_seconds"] == 10.0 and low_item["reason"]
    assert client.get("/v1/queue", params={"team": "research"}, headers=nlp).json() == []
    assert all(
        i["pool"] == "training"
        for i in client.get("/v1/queue", params={"pool": "training"}, headers=nlp).json()
    )


def test_get_and_delete_unused_objects(client, admin):
    pool = client.get("/v1/pools/inference", headers=admin).json()
    assert pool["placement"] == "spread" and pool["guaranteed"]["rtx4090-24g"] == 32
    assert client.get("/v1/pools/nope", headers=admin).status_code == 404
    body = {"name": "tmp", "pool": "mixed"}
    assert client.post("/v1/teams", json=body, headers=admin).status_code == 201
    assert client.get("/v1/teams/tmp", headers=admin).json()["pool"] == "mixed"
    assert client.delete("/v1/teams/tmp", headers=admin).status_code == 204
    assert client.get("/v1/teams/tmp", headers=admin).status_code == 404
    assert client.delete("/v1/teams/tmp", headers=admin).status_code == 404


def test_readyz_reports_a_schema_that_is_not_current(services, engine):
    from fastapi.testclient import TestClient

    from app.main import create_app

    with engine.begin() as conn:
        current = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar_one()
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '0005'")  # behind
    try:
        with TestClient(create_app(services=services)) as c:
            r = c.get("/readyz")
            assert r.status_code == 503 and "gpuq db upgrade" in r.json()["detail"]
            assert c.get("/healthz").status_code == 200
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql("UPDATE alembic_version SET version_num = %(v)s", {"v": current})


def test_a_node_holds_kubernetes_taints_and_labels(client, admin):
    """A taint is a Kubernetes taint (key, value, effect; NoSchedule when left out) and
    the API shows it back so; a patch replaces the list (bad ones: test_bad_input)."""
    body = {"name": "v100-9", "gpu_type": "v100-16g", "gpus": 4, "cpu": 32, "memory_gb": 128,
            "labels": {"nvidia.com/gpu.product": "Tesla-V100-SXM2-16GB"},
            "taints": [{"key": "example.com/dedicated", "value": "ml"}]}
    r = client.post("/v1/nodes", json=body, headers=admin)
    assert r.status_code == 201, r.text
    assert r.json()["taints"] == [
        {"key": "example.com/dedicated", "value": "ml", "effect": "NoSchedule"}]
    assert r.json()["labels"] == body["labels"]
    taints = [{"key": "spot", "value": "", "effect": "PreferNoSchedule"},
              {"key": "spot", "value": "", "effect": "NoExecute"}]
    r = client.patch("/v1/nodes/v100-9", json={"taints": taints}, headers=admin)
    assert r.status_code == 200, r.text
    assert client.get("/v1/nodes/v100-9", headers=admin).json()["taints"] == taints


def _every_page(client, admin, path: str, params: dict) -> list[dict]:
    """Every item of a paged list body, following ``X-Next-Cursor`` (and checking that
    ``Link`` names the next page and no page exceeds ``params["limit"]``)."""
    items: list[dict] = []
    while True:
        r = client.get(path, params=params, headers=admin)
        assert r.status_code == 200 and len(r.json()) <= params["limit"], r.text
        items += r.json()
        if "x-next-cursor" not in r.headers:
            return items
        assert r.headers["link"].endswith('>; rel="next"')
        params = {**params, "cursor": r.headers["x-next-cursor"]}


def test_leases_come_a_page_at_a_time(client, admin, session_factory, clock):
    """Ended leases stay as history, so GET /v1/leases answers at most ``limit`` of them
    and hands out the next page's cursor (before: every lease ever made, in one answer)."""
    ids = [int(client.post("/v1/jobs", json=job_body(f"l{i}"), headers=admin).json()["id"])
           for i in range(5)]
    now = clock()
    with session_factory() as s:
        for i, jid in enumerate(ids):
            s.add(LeaseRow(borrower="training", lender="mixed", gpu_type="a100-80g", units=10.0,
                           job_id=jid, started_at=now, expires_at=now + timedelta(hours=1),
                           state="returned" if i < 3 else "active"))
        s.commit()
    seen = [x["job_id"] for x in _every_page(client, admin, "/v1/leases", {"limit": 2})]
    assert seen == [str(i) for i in ids]  # oldest first, each once
    active = client.get("/v1/leases", params={"state": "active", "limit": 1}, headers=admin)
    assert [x["state"] for x in active.json()] == ["active"] and "x-next-cursor" in active.headers
    bad = client.get("/v1/leases", params={"cursor": "!!nope"}, headers=admin)
    assert bad.status_code == 422 and bad.json()["detail"].startswith("cursor"), bad.text


def test_tokens_come_a_page_at_a_time(client, admin):
    """Revoked and rotated tokens stay as history, so GET /v1/tokens answers at most
    ``limit`` of them and hands out the next page's cursor (before: every token ever made,
    in one answer); an unknown team is a 422, as GET /v1/jobs answers."""
    made = [client.post("/v1/tokens", json={"scope": "team:nlp", "name": f"ci-{i}"},
                        headers=admin).json()["id"] for i in range(4)]
    seen = [x["id"] for x in _every_page(client, admin, "/v1/tokens",
                                         {"limit": 2, "team": "nlp"})]
    assert set(made) <= set(seen) and seen == sorted(seen) and len(seen) == len(set(seen))
    every = client.get("/v1/tokens", headers=admin).json()
    assert [x["id"] for x in every if x["scope"] == "team:nlp"] == seen  # default page: all
    bad = client.get("/v1/tokens", params={"team": "nobody"}, headers=admin)
    assert bad.status_code == 422 and "nobody" in bad.json()["detail"], bad.text
    bad = client.get("/v1/tokens", params={"cursor": "!!nope"}, headers=admin)
    assert bad.status_code == 422 and bad.json()["detail"].startswith("cursor"), bad.text
