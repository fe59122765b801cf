"""A team's caps on its queue hold: pending jobs and submit rate, 429 with Retry-After.

Before: one team sent 200,000 jobs in 45 s, all 201; passes then took up to 100 s and
another team's one-GPU job waited 76 s to start.
"""

from __future__ import annotations

import pytest

from app.settings import Settings
from tests.integration.conftest import ADMIN_TOKEN, job_body


@pytest.fixture
def settings(tmp_path) -> Settings:
    return Settings(
        GPUQ_DATA_DIR=tmp_path,
        GPUQ_ADMIN_TOKEN=ADMIN_TOKEN,
        GPUQ_RUN_LOOPS=False,
        GPUQ_TEAM_MAX_PENDING=3,
        GPUQ_TEAM_SUBMIT_RATE=1000,
        GPUQ_TEAM_SUBMIT_BURST=50,
    )


def small(name: str, team: str = "nlp") -> dict:
    return job_body(name, team, resources={"gpus": 1, "gpu_types": ["a100-80g"]})


def assert_429(r, *words: str) -> None:
    assert r.status_code == 429, r.text
    assert int(r.headers["Retry-After"]) >= 1
    for w in words:
        assert w in r.json()["detail"], r.json()["detail"]


def test_pending_cap_refuses_the_team_and_no_other(client, admin, team_token):
    nlp, recsys = team_token("nlp"), team_token("recsys")
    ids = []
    for i in range(3):
        r = client.post("/v1/jobs", json=small(f"j{i}"), headers=nlp)
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    assert_429(client.post("/v1/jobs", json=small("j3"), headers=nlp), "nlp", "3 jobs pending")
    # the cached-token path refuses as well (the second submit of the same token)
    assert_429(client.post("/v1/jobs", json=small("j4"), headers=nlp), "max_pending")
    # another team is not held back by nlp's queue
    assert client.post("/v1/jobs", json=small("r0", "recsys"), headers=recsys).status_code == 201
    # the admin acts for the install: not limited
    assert client.post("/v1/jobs", json=small("a0"), headers=admin).status_code == 201
    # a cancel frees a place
    assert client.post(f"/v1/jobs/{ids[0]}/cancel", headers=nlp).status_code == 200
    r = client.post("/v1/jobs", json=small("a1"), headers=admin)  # the admin's took it
    assert client.post(f"/v1/jobs/{r.json()['id']}/cancel", headers=admin).status_code == 200
    assert client.post(f"/v1/jobs/{ids[1]}/cancel", headers=nlp).status_code == 200
    assert client.post("/v1/jobs", json=small("j5"), headers=nlp).status_code == 201


def test_batch_past_the_cap_writes_nothing(client, admin, team_token):
    nlp = team_token("nlp")
    assert client.post("/v1/jobs", json=small("j0"), headers=nlp).status_code == 201
    r = client.post("/v1/jobs:batch", json={"jobs": [small(f"b{i}") for i in range(3)]},
                    headers=nlp)
    assert_429(r, "nlp")
    pending = client.get("/v1/jobs?team=nlp&status=pending", headers=nlp).json()
    assert [j["name"] for j in pending["items"]] == ["j0"]
    r = client.post("/v1/jobs:batch", json={"jobs": [small(f"b{i}") for i in range(2)]},
                    headers=nlp)
    assert r.status_code == 201, r.text


def test_team_sets_its_own_cap_through_the_api(client, admin, team_token):
    r = client.patch("/v1/teams/nlp", json={"max_pending": 5}, headers=admin)
    assert r.status_code == 200 and r.json()["max_pending"] == 5, r.text
    nlp = team_token("nlp")
    for i in range(5):
        assert client.post("/v1/jobs", json=small(f"j{i}"), headers=nlp).status_code == 201
    assert_429(client.post("/v1/jobs", json=small("j5"), headers=nlp), "at most 5")
    r = client.patch("/v1/teams/nlp", json={"max_pending": 0}, headers=admin)
    assert r.status_code == 422, r.text


@pytest.mark.parametrize("override", [False, True])
def test_submit_rate_refuses_past_the_burst(client, admin, team_token, override):
    client.app.state.submit_rate.rate = 0.001  # one job every 1,000 s after the burst
    nlp, recsys = team_token("nlp"), team_token("recsys")
    client.patch("/v1/teams/nlp", json={"max_pending": 1000}, headers=admin)
    if override:  # the team's own rate wins over the install's
        r = client.patch("/v1/teams/nlp", json={"submit_rate": 1e6}, headers=admin)
        assert r.status_code == 200, r.text
    r = client.post("/v1/jobs:batch", json={"jobs": [small(f"b{i}") for i in range(50)]},
                    headers=nlp)
    assert r.status_code == 201, r.text
    r = client.post("/v1/jobs", json=small("one-more"), headers=nlp)
    if override:
        assert r.status_code == 201, r.text
        return
    assert_429(r, "nlp", "jobs/s")
    assert int(r.headers["Retry-After"]) >= 900
    # another team has its own bucket
    assert client.post("/v1/jobs", json=small("r0", "recsys"), headers=recsys).status_code == 201


def test_batch_larger_than_the_burst_is_422(client, team_token):
    nlp = team_token("nlp")
    r = client.post("/v1/jobs:batch", json={"jobs": [small(f"b{i}") for i in range(51)]},
                    headers=nlp)
    assert r.status_code == 422 and r.json()["detail"].startswith("jobs:"), r.text


def test_openapi_documents_429_on_submits(client):
    doc = client.get("/openapi.json").json()
    for path in ("/v1/jobs", "/v1/jobs:batch"):
        answer = doc["paths"][path]["post"]["responses"]["429"]
        assert "Retry-After" in answer["headers"]
