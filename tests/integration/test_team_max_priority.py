"""A team's ``max_priority``: the highest priority class its jobs may name.

Before it, any team could name any class: a tenant's jobs could be P0 (never preempted,
ahead of every other team) whatever the operator meant its work to be.
"""

from __future__ import annotations

from tests.integration.conftest import job_body


def submit(client, headers, name: str, priority: str | None, team: str = "nlp"):
    body = job_body(name, team, resources={"gpus": 1, "gpu_types": ["a100-80g"]})
    if priority is not None:
        body["priority"] = priority
    return client.post("/v1/jobs", json=body, headers=headers)


def test_a_team_names_priority_classes_up_to_its_max(client, admin, team_token):
    nlp = team_token("nlp")
    assert submit(client, nlp, "before", "P0").status_code == 201  # unset: any class
    r = client.patch("/v1/teams/nlp", json={"max_priority": "P1"}, headers=admin)
    assert r.status_code == 200 and r.json()["max_priority"] == "P1", r.text
    assert client.get("/v1/teams/nlp", headers=nlp).json()["max_priority"] == "P1"
    for who in (nlp, admin):  # the team's policy, whoever submits its job (as its pools)
        r = submit(client, who, "urgent", "P0")
        assert r.status_code == 422, r.text
        assert r.json()["detail"] == (
            "priority: team nlp may name priority classes up to P1 (max_priority); "
            "P0 is above it")
    for prio in ("P1", "P2", None):  # at or below it, and the team's default
        assert submit(client, nlp, f"ok-{(prio or 'default').lower()}", prio).status_code == 201
    # another team is not bound by nlp's ceiling
    assert submit(client, team_token("recsys"), "online", "P0", team="recsys").status_code == 201
    r = client.patch("/v1/teams/nlp", json={"max_priority": None}, headers=admin)
    assert r.status_code == 200 and r.json()["max_priority"] is None
    assert submit(client, nlp, "after", "P0").status_code == 201


def test_max_priority_is_checked_when_written(client, admin):
    r = client.patch("/v1/teams/nlp", json={"max_priority": "P9"}, headers=admin)
    assert r.status_code == 422 and r.json()["detail"] == "max_priority: unknown priority " \
        "class 'P9'", r.text
    r = client.patch("/v1/teams/nlp", json={"default_priority": "P0", "max_priority": "P1"},
                     headers=admin)
    assert r.status_code == 422, r.text
    assert r.json()["detail"] == "default_priority: default_priority P0 is above max_priority P1"
    assert client.get("/v1/teams/nlp", headers=admin).json()["max_priority"] is None


def test_a_priority_class_a_team_is_capped_at_is_not_deleted(client, admin):
    r = client.post("/v1/priority-classes", json={"name": "p-mid", "value": 300},
                    headers=admin)
    assert r.status_code == 201, r.text
    assert client.patch("/v1/teams/research", json={"max_priority": "p-mid"},
                        headers=admin).status_code == 200
    r = client.delete("/v1/priority-classes/p-mid", headers=admin)
    assert r.status_code == 409 and "research" in r.json()["detail"], r.text
