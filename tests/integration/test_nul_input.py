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
