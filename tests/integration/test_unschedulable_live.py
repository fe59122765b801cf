"""``unschedulable`` at its edges through the live dispatcher and REST on a
manual clock (the demo cluster: a100-0 with 7 whole cards and
one MIG-cut card, a100-1 with 8 whole cards). Cordoning goes through the
simulated cluster's backend, the nodes table (``PATCH /v1/nodes/{name}``)."""

from __future__ import annotations

from tests.integration.conftest import job_body, submit_before_shrink

A100 = {"gpu_types": ["a100-80g"]}


def submit(client, admin, name, **kw) -> str:
    r = client.post("/v1/jobs", json=job_body(name=name, **kw), headers=admin)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def job(client, admin, jid):
    return client.get(f"/v1/jobs/{jid}", headers=admin).json()


def event_types(client, admin, jid):
    return [e["type"] for e in client.get(f"/v1/jobs/{jid}/events", headers=admin).json()]


def cordon(client, admin, node, schedulable=False):
    r = client.patch(f"/v1/nodes/{node}", json={"schedulable": schedulable}, headers=admin)
    assert r.status_code == 200, r.text


def test_job_waits_for_cordoned_nodes_then_runs(client, admin, dispatcher):
    for n in ("a100-0", "a100-1"):
        cordon(client, admin, n)
    jid = submit(client, admin, "upgrade-wait", resources={"gpus": 4, **A100})
    for _ in range(3):
        dispatcher.run_once()
        j = job(client, admin, jid)
        assert j["status"] == "pending", j  # not unschedulable: the nodes still exist
    assert j["reason"].startswith(
        "waits for nodes that are cordoned or not ready (a100-0, a100-1): "), j
    cordon(client, admin, "a100-1", schedulable=True)
    dispatcher.run_once()
    j = job(client, admin, jid)
    assert j["status"] == "running" and j["allocations"][0]["node"] == "a100-1"


def test_demo_gang_is_unschedulable_with_a_true_reason(client, admin, dispatcher):
    jid = submit_before_shrink(client, admin, job_body(
        "two-nodes", team="recsys", priority="P0", replicas=2, min_available=2,
        resources={"gpus": 8, **A100}))
    dispatcher.run_once()
    j = job(client, admin, jid)
    assert j["status"] == "unschedulable"
    assert j["reason"].startswith(
        "needs 2 replicas x 8 whole a100-80g GPU(s) at once; the whole cluster holds at most 1")


def test_unschedulable_job_requeued_when_the_cluster_grows(client, admin, dispatcher):
    # 10 whole cards on one node: more than any demo node has (100 CU: within nlp's quota)
    jid = submit_before_shrink(client, admin, job_body("needs-10", resources={"gpus": 10, **A100}))
    dispatcher.run_once()
    assert job(client, admin, jid)["status"] == "unschedulable"
    dispatcher.run_once()  # nothing changed: it stays
    assert job(client, admin, jid)["status"] == "unschedulable"
    r = client.post("/v1/nodes", headers=admin, json={
        "name": "a100-big", "gpu_type": "a100-80g", "gpus": 16, "cpu": 256,
        "memory_gb": 2048})
    assert r.status_code == 201, r.text
    dispatcher.run_once()  # the inventory changed: re-checked, requeued, then admitted
    j = job(client, admin, jid)
    assert j["status"] in ("admitted", "running"), j
    evs = client.get(f"/v1/jobs/{jid}/events", headers=admin).json()
    (req,) = [e for e in evs if e["type"] == "requeued"]
    assert req["reason"] == "requeued: cluster changed" and req["to_status"] == "pending"


def test_relabelled_mig_layout_requeues(client, admin, dispatcher):
    """A MIG-cut card counts as its slices: 8 whole cards on a100-0 exist only
    once its MIG layout is removed."""
    cordon(client, admin, "a100-1")  # out of the picture for this test
    jid = submit(client, admin, "eight-whole", resources={"gpus": 8, **A100})
    r = client.patch("/v1/nodes/a100-1", json={"gpus": 4}, headers=admin)
    assert r.status_code == 200, r.text
    dispatcher.run_once()
    j = job(client, admin, jid)
    assert j["status"] == "unschedulable"
    assert "a100-0 has 7 whole + 1 cut into MIG slices" in j["reason"], j
    r = client.patch("/v1/nodes/a100-0", json={"mig_layout": None}, headers=admin)
    assert r.status_code == 200, r.text
    dispatcher.run_once()
    assert job(client, admin, jid)["status"] in ("admitted", "running")
    assert "requeued" in event_types(client, admin, jid)


def test_admin_requeue(client, admin, dispatcher, team_token):
    jid = submit_before_shrink(client, admin, job_body("needs-16", resources={"gpus": 16, **A100}))
    dispatcher.run_once()
    assert job(client, admin, jid)["status"] == "unschedulable"
    nlp = team_token("nlp")
    r = client.post(f"/v1/jobs/{jid}/requeue", headers=nlp)
    assert r.status_code == 403, r.text
    r = client.post("/v1/jobs/999999/requeue", headers=admin)
    assert r.status_code == 404 and "detail" in r.json()
    r = client.post(f"/v1/jobs/{jid}/requeue", headers=admin)
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "pending" and r.json()["reason"] == "requeued by admin"
    r = client.post(f"/v1/jobs/{jid}/requeue", headers=admin)
    assert r.status_code == 409 and "unschedulable" in r.json()["detail"]
    dispatcher.run_once()  # judged again: still too big for this cluster
    assert job(client, admin, jid)["status"] == "unschedulable"
    assert event_types(client, admin, jid).count("requeued") == 1
