"""Text PostgreSQL cannot hold (a NUL character) is a 4xx with a detail, never
a 500 (schemathesis found ``GET /v1/queue?pool=%00``)."""

from __future__ import annotations

import pytest

from tests.integration.conftest import job_body


@pytest.mark.parametrize(
    "path",
    [
        "/v1/queue?pool=%00",
        "/v1/queue?team=a%00b",
        "/v1/jobs?pool=train%00ing",
        "/v1/jobs?status=%00&team=nlp",
        "/v1/jobs?cursor=%00",
        "/v1/jobs/1%00",
        "/v1/pools/a%00",
        "/v1/teams/nlp%00/usage",
        "/v1/gpu-types/%00",
        "/v1/reports/fairness?window_s=%00",
    ],
)
def test_nul_in_path_or_query_is_422(client, admin, path):
    r = client.get(path, headers=admin)
    assert r.status_code == 422, (path, r.status_code, r.text)
    assert "NUL" in r.json()["detail"]


@pytest.mark.parametrize(
    "body",
    [
        job_body("bad\u0000name"),
        job_body(labels={"k": "v\u0000"}),
        job_body(pod_template={"spec": {"containers": [{"name": "m", "image": "x\u0000"}]}}),
    ],
)
def test_nul_in_a_json_body_is_4xx(client, admin, body):
    r = client.post("/v1/jobs", json=body, headers=admin)
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    assert r.json()["detail"]
    # the API still works afterwards (the failed statement left no broken session)
    assert client.post("/v1/jobs", json=job_body(), headers=admin).status_code == 201


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("post", "/v1/gpu-types",
         {"name": "h100", "memory_gb": 80, "weight": 20, "vendor": "nv\u0000"}, "vendor"),
        ("post", "/v1/gpu-types",
         {"name": "h100", "memory_gb": 80, "weight": 20, "product": "H100\u0000"}, "product"),
        ("post", "/v1/nodes", {"name": "n9", "rack": "r\u0000"}, "rack"),
        ("post", "/v1/nodes/a100-0/cordon", {"reason": "fan\u0000"}, "reason"),
        ("post", "/v1/tokens", {"scope": "admin", "description": "ci\u0000"}, "description"),
    ],
)
def test_nul_in_stored_free_text_names_the_field(client, admin, method, path, body, field):
    """Free text that is stored refuses NUL at the field, and the OpenAPI document says so
    (before: the database refused it and the 422 read "invalid value", naming no field;
    found by pytest -m long_fuzz)."""
    r = getattr(client, method)(path, json=body, headers=admin)
    assert r.status_code == 422, r.text
    assert field in r.json()["detail"] and "NUL" in r.json()["detail"], r.text
    nodes = {n["name"]: n for n in client.get("/v1/nodes", headers=admin).json()}
    assert "n9" not in nodes and nodes["a100-0"]["schedulable"]
    assert "h100" not in {t["name"] for t in client.get("/v1/gpu-types", headers=admin).json()}
