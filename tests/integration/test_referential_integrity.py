"""Deletes never leave a dangling name behind (the
delete rule): deleting a GPU type, pool, team, priority class or node that
something still names is a 409 whose detail names the referrer; once the
referrer is gone the delete succeeds and later writes of others still work."""

from __future__ import annotations

from tests.integration.conftest import job_body


def _detail(r) -> str:
    assert r.status_code == 409, (r.status_code, r.text)
    return r.json()["detail"]


def test_gpu_type_a_pool_guarantees_cannot_be_deleted(client, admin):
    gt = {"name": "h100-80g", "memory_gb": 80, "weight": 12}
    assert client.post("/v1/gpu-types", json=gt, headers=admin).status_code == 201
    pool = {"name": "h100s", "gpu_types": [], "guaranteed": {"h100-80g": 24}}
    assert client.post("/v1/pools", json=pool, headers=admin).status_code == 201
    detail = _detail(client.delete("/v1/gpu-types/h100-80g", headers=admin))
    assert "pool 'h100s' (guaranteed)" in detail
    assert client.get("/v1/gpu-types/h100-80g", headers=admin).status_code == 200
    # the demo's types are named by nodes, pools' gpu_types and lend limits
    detail = _detail(client.delete("/v1/gpu-types/a100-80g", headers=admin))
    assert "node 'a100-0'" in detail and "pool 'training' (gpu_types)" in detail
    assert "pool 'training' (lend_limit)" in detail
    # drop the reference: now it goes
    r = client.patch("/v1/pools/h100s", json={"guaranteed": {}}, headers=admin)
    assert r.status_code == 200, r.text
    assert client.delete("/v1/gpu-types/h100-80g", headers=admin).status_code == 204


def test_gpu_type_in_a_team_quota_by_type_cannot_be_deleted(client, admin):
    gt = {"name": "l4-24g", "memory_gb": 24, "weight": 3}
    assert client.post("/v1/gpu-types", json=gt, headers=admin).status_code == 201
    r = client.patch("/v1/teams/research", json={"quota_by_type": {"l4-24g": 6}}, headers=admin)
    assert r.status_code == 200, r.text
    assert "team 'research' (quota_by_type)" in _detail(
        client.delete("/v1/gpu-types/l4-24g", headers=admin)
    )


def test_pool_in_allowed_pools_cannot_be_deleted(client, admin):
    pool = {"name": "spare", "gpu_types": ["v100-16g"]}
    assert client.post("/v1/pools", json=pool, headers=admin).status_code == 201
    r = client.patch("/v1/teams/nlp", json={"allowed_pools": ["mixed", "spare"]}, headers=admin)
    assert r.status_code == 200, r.text
    detail = _detail(client.delete("/v1/pools/spare", headers=admin))
    assert "team 'nlp' (allowed_pools)" in detail
    # an unrelated PATCH of the team keeps working (it failed once the pool was gone)
    r = client.patch("/v1/teams/nlp", json={"weight": 3}, headers=admin)
    assert r.status_code == 200, r.text
    assert client.delete("/v1/pools/mixed", headers=admin).status_code == 409


def test_team_with_jobs_and_pool_of_a_team_cannot_be_deleted(client, admin):
    r = client.post("/v1/jobs", json=job_body(team="research", pool="mixed"), headers=admin)
    assert r.status_code == 201, r.text
    jid = r.json()["id"]
    assert f"job {int(jid)!r}" in _detail(client.delete("/v1/teams/research", headers=admin))
    detail = _detail(client.delete("/v1/pools/mixed", headers=admin))
    assert "team 'research' (pool)" in detail and "team 'nlp' (allowed_pools)" in detail


def test_priority_class_in_use_cannot_be_deleted(client, admin):
    pc = {"name": "P3", "value": 50, "preemptible": True}
    assert client.post("/v1/priority-classes", json=pc, headers=admin).status_code == 201
    assert client.get("/v1/priority-classes/P3", headers=admin).json() == pc
    assert "team 'recsys' (default_priority)" in _detail(
        client.delete("/v1/priority-classes/P0", headers=admin)
    )
    r = client.post("/v1/jobs", json=job_body(priority="P3"), headers=admin)
    assert r.status_code == 201, r.text
    assert "job " in _detail(client.delete("/v1/priority-classes/P3", headers=admin))


def test_unused_priority_class_is_deleted(client, admin):
    pc = {"name": "P9", "value": 1, "preemptible": True}
    assert client.post("/v1/priority-classes", json=pc, headers=admin).status_code == 201
    assert client.delete("/v1/priority-classes/P9", headers=admin).status_code == 204
    assert client.get("/v1/priority-classes/P9", headers=admin).status_code == 404
    assert client.delete("/v1/priority-classes/P9", headers=admin).status_code == 404
