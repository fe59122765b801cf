"""A job without GPUs is refused at submit when no CPU-only node could ever run it
(before: ``gpus: 0, cpu: 0, memory_gb: 0`` got 201 and ran on a GPU node at 0 CU), and
placed on a GPU node only when ``scheduler.cpu_jobs_on_gpu_nodes`` says so."""

from __future__ import annotations

from tests.integration.conftest import job_body

NOTHING = {"gpus": 0, "cpu": 0, "memory_gb": 0}


def test_the_demo_runs_cpu_only_work_on_its_cpu_node(client, team_token, dispatcher):
    """The contract's ``gpus: 0`` (CPU-only work) works on the cluster ``make run`` starts:
    the demo has a CPU-only node, and the job runs there, at 0 CU."""
    nlp = team_token("nlp")
    r = client.post("/v1/jobs", json=job_body(resources={"gpus": 0, "cpu": 4, "memory_gb": 8}),
                    headers=nlp)
    assert r.status_code == 201, r.text
    dispatcher.run_once()
    job = client.get(f"/v1/jobs/{r.json()['id']}", headers=nlp).json()
    assert job["status"] in ("admitted", "running") and job["units"] == 0.0, job
    assert [a["node"] for a in job["allocations"]] == ["cpu-0"], job


def test_zero_gpu_job_on_a_gpu_only_cluster(client, admin, team_token, dispatcher):
    nlp = team_token("nlp")
    # the demo's CPU-only node gone: a cluster of GPU nodes only
    assert client.delete("/v1/nodes/cpu-0", headers=admin).status_code == 204
    r = client.post("/v1/jobs", json=job_body(resources=NOTHING), headers=nlp)
    assert r.status_code == 422, r.text
    assert "CPU-only nodes" in r.json()["detail"] and "cpu_jobs_on_gpu_nodes" in r.json()["detail"]
    # a CPU-only node: the job runs there
    r = client.post("/v1/nodes", json={"name": "cpu-0", "cpu": 16, "memory_gb": 64},
                    headers=admin)
    assert r.status_code == 201, r.text
    r = client.post("/v1/jobs", json=job_body(resources={"gpus": 0, "cpu": 2}), headers=nlp)
    assert r.status_code == 201, r.text
    dispatcher.run_once()
    job = client.get(f"/v1/jobs/{r.json()['id']}", headers=nlp).json()
    assert [a["node"] for a in job["allocations"]] == ["cpu-0"], job
