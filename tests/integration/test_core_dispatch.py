"""The scheduling core behind the dispatcher: new request modes end to end, and
the queue showing each pending job's position and reason."""

from __future__ import annotations

from tests.integration.conftest import job_body


def _submit(client, admin, **kw) -> str:
    r = client.post("/v1/jobs", json=job_body(**kw), headers=admin)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _job(client, admin, job_id):
    return client.get(f"/v1/jobs/{job_id}", headers=admin).json()


def test_mig_units_and_share_jobs_are_admitted_and_persisted(client, admin, dispatcher):
    mig = _submit(client, admin, name="infer-mig", team="recsys",
                  resources={"mig": "auto", "min_gpu_memory_gb": 18, "gpu_types": ["a100-80g"]})
    units = _submit(client, admin, name="units", team="nlp", resources={"gpu_units": 20})
    share = _submit(client, admin, name="share", team="recsys",
                    resources={"gpu_share": 0.5, "min_gpu_memory_gb": 8})
    dispatcher.run_once()
    m = _job(client, admin, mig)
    assert m["status"] == "running", m
    [a] = m["allocations"]
    assert a["node"] == "a100-0" and a["gpu_type"] == "a100-80g"
    assert abs(a["units"] - 10 * 0.2857) < 1e-6
    u = _job(client, admin, units)
    assert u["status"] == "running", u
    assert sum(x["units"] for x in u["allocations"]) == 20
    s = _job(client, admin, share)
    assert s["status"] == "running", s
    [b] = s["allocations"]
    assert b["gpu_type"] == "rtx4090-24g" and b["units"] == 1.0


def test_queue_shows_position_and_actionable_reason(client, admin, dispatcher):
    # P1 and no borrow limit: a P0 job (recsys' default) never borrows beyond its pool's
    # 20 CU guarantee, and the demo caps inference's borrowing at 40 CU
    r = client.patch("/v1/pools/inference", json={"borrow_limit": None}, headers=admin)
    assert r.status_code == 200, r.text
    filler = _submit(client, admin, name="filler", team="recsys", priority="P1",
                     resources={"gpus": 8, "gpu_types": ["a100-80g"]})
    dispatcher.run_once()
    assert _job(client, admin, filler)["status"] == "running", _job(client, admin, filler)["reason"]
    big = _submit(client, admin, name="big", team="nlp",
                  resources={"gpus": 8, "gpu_types": ["a100-80g"], "min_gpu_memory_gb": 40})
    # 2 x 6 whole A100s fit the cluster (one replica per node; 2 x 8 could never: a100-0
    # has 7 whole cards, so that gang is unschedulable) but not a 100 CU quota
    r = client.put("/v1/teams/nlp/quota", json={"quota_units": 100, "quota_by_type": {}},
                   headers=admin)
    assert r.status_code == 200, r.text
    over = _submit(client, admin, name="over-quota", team="nlp",
                   resources={"gpus": 6, "gpu_types": ["a100-80g"]}, replicas=2, min_available=2)
    small = _submit(client, admin, name="small", team="nlp",
                    resources={"gpus": 1, "min_gpu_memory_gb": 30})
    dispatcher.run_once()
    assert _job(client, admin, small)["status"] == "running"
    q = {i["id"]: i for i in client.get("/v1/queue", headers=admin).json()}
    assert q[big]["position"] == 1 and q[over]["position"] == 2
    # a100-0 has 7 whole cards (device 0 is cut into MIG slices), a100-1 is taken
    assert "needs 8 x a100-80g (>= 40 GB)" in q[big]["reason"]
    assert "largest free block: a100-80g 7" in q[big]["reason"]
    assert "quota" in q[over]["reason"] and "100" in q[over]["reason"]
