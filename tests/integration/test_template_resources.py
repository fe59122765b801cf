"""A template's own requests, limits and node selection are respected or refused at
submit with the field (never a Pod the apiserver or the kubelet refuses after the job
waited), and the job books its Pod's effective requests (real PostgreSQL)."""

from __future__ import annotations

from tests.integration.conftest import job_body

SC = {"runAsNonRoot": True, "runAsUser": 65534, "allowPrivilegeEscalation": False,
      "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}


def _main(**res):
    return {"name": "train", "image": "trainer:1", "securityContext": SC, **res}


def _post(client, admin, template, **resources):
    body = job_body(resources={"gpus": 1, "gpu_types": ["a100-80g"], **resources},
                    pod_template={"spec": template})
    return client.post("/v1/jobs", json=body, headers=admin)


def test_limit_below_the_request_is_a_422_naming_the_field(client, admin):
    # the old Pod asked 64 GB under an 8Gi limit: the apiserver's 422 after the wait
    r = _post(client, admin, {"containers": [_main(resources={"limits": {"memory": "8Gi"}})]},
              memory_gb=64)
    assert r.status_code == 422, r.text
    assert "pod_template.spec.containers[0].resources.limits.memory" in r.text
    assert "resources.memory_gb (64 GB)" in r.text


def test_main_request_other_than_resources_is_refused(client, admin):
    r = _post(client, admin, {"containers": [_main(resources={"requests": {"cpu": "8"}})]},
              cpu=2)
    assert r.status_code == 422 and "requests.cpu" in r.text and "resources.cpu" in r.text


def test_node_selector_gpuq_does_not_evaluate_is_refused(client, admin):
    r = _post(client, admin, {"containers": [_main()], "nodeSelector": {"disktype": "ssd"}})
    assert r.status_code == 422 and "pod_template.spec.nodeSelector.disktype" in r.text
    assert "NodeAffinity" in r.text


def test_sidecar_and_init_container_are_booked(client, admin, dispatcher):
    side = {"name": "proxy", "image": "envoy:1", "restartPolicy": "Always",
            "securityContext": SC, "resources": {"requests": {"cpu": "1", "memory": "2G"}}}
    init = {"name": "fetch", "image": "x:1", "securityContext": SC,
            "resources": {"requests": {"cpu": "2", "memory": "1G"}}}
    r = _post(client, admin, {"containers": [_main()], "initContainers": [side, init]},
              cpu=4, memory_gb=16)
    assert r.status_code == 201, r.text
    dispatcher.run_once()
    job = client.get(f"/v1/jobs/{r.json()['id']}", headers=admin).json()
    (alloc,) = job["allocations"]
    # the main container's 4 CPU / 16 GB plus the sidecar running beside it
    assert (alloc["cpu"], alloc["memory_gb"]) == (5, 18)
