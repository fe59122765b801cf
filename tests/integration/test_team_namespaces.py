"""A team cannot name a namespace of another team: the namespace is the
tenant boundary, so two teams listing one would share Secrets and PVCs again."""

from __future__ import annotations

from tests.integration.conftest import job_body

SC = {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
      "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}


def test_namespaces_belong_to_one_team(client, admin, team_token):
    r = client.patch("/v1/teams/nlp", json={"namespaces": ["nlp-jobs"]}, headers=admin)
    assert r.status_code == 200, r.text
    r = client.patch("/v1/teams/recsys", json={"namespaces": ["recsys-jobs", "nlp-jobs"]},
                     headers=admin)
    assert r.status_code == 409 and "nlp" in r.json()["detail"], r.text
    assert client.get("/v1/teams/recsys", headers=admin).json()["namespaces"] == []
    # nlp's own namespace: its references resolve to its own objects
    tpl = {"metadata": {"namespace": "nlp-jobs"},
           "spec": {"containers": [{"name": "t", "image": "t:1", "securityContext": SC}],
                    "volumes": [{"name": "c", "persistentVolumeClaim": {"claimName": "ck"}}]}}
    nlp = team_token("nlp")
    assert client.post("/v1/jobs", json=job_body(pod_template=tpl), headers=nlp).status_code == 201
    # recsys, in the shared job namespace, may not name a PVC
    tpl["metadata"]["namespace"] = "gpuq-jobs"
    r = client.post("/v1/jobs", json=job_body(team="recsys", pod_template=tpl),
                    headers=team_token("recsys"))
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith("pod_template.spec.volumes[0].persistentVolumeClaim")
