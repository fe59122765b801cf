"""Jobs over REST against real PostgreSQL: submit, read, list, cancel, events,
idempotency, pagination, and team isolation."""

from __future__ import annotations

import base64

from tests.integration.conftest import job_body

JOB_FIELDS = {
    "id",
    "name",
    "team",
    "pool",
    "priority",
    "status",
    "reason",
    "submitted_at",
    "admitted_at",
    "started_at",
    "finished_at",
    "wait_seconds",
    "preemption_count",
    "units",
    "allocations",
    "lease",
    "spec",
    "estimated_start",
    "reason_code",
}


def test_submit_returns_job_with_api_fields(client, admin):
    r = client.post("/v1/jobs", json=job_body(), headers=admin)
    assert r.status_code == 201, r.text
    j = r.json()
    assert set(j) >= JOB_FIELDS
    assert j["status"] == "pending"
    assert j["pool"] == "training"  # the team's pool
    assert j["priority"] == "P1"  # the team's default priority
    assert j["units"] == 20.0  # 2 x a100 (weight 10)
    assert j["allocations"] == [] and j["lease"] is None
    got = client.get(f"/v1/jobs/{j['id']}", headers=admin).json()
    assert got["id"] == j["id"] and got["spec"]["resources"]["gpus"] == 2


def test_submit_uses_allowed_pool_and_explicit_priority(client, admin):
    r = client.post("/v1/jobs", json=job_body(pool="mixed", priority="P2"), headers=admin)
    assert r.status_code == 201, r.text
    assert (r.json()["pool"], r.json()["priority"]) == ("mixed", "P2")


def test_idempotent_submit_returns_same_job(client, admin, team_token):
    nlp = team_token("nlp")
    h = {**nlp, "Idempotency-Key": "abc-1"}
    first = client.post("/v1/jobs", json=job_body(), headers=h)
    again = client.post("/v1/jobs", json=job_body(), headers=h)
    assert first.status_code == 201 and again.status_code == 200
    assert first.json()["id"] == again.json()["id"]
    assert len(client.get("/v1/jobs", headers=admin).json()["items"]) == 1
    # same key, different body: a conflict, nothing written
    other = client.post("/v1/jobs", json=job_body(name="other"), headers=h)
    assert other.status_code == 409 and "Idempotency-Key" in other.json()["detail"]
    # the same key from another team is another job
    r2 = client.post(
        "/v1/jobs", json=job_body(team="research"), headers={**admin, "Idempotency-Key": "abc-1"}
    )
    assert r2.status_code == 201 and r2.json()["id"] != first.json()["id"]
    assert len(client.get("/v1/jobs", headers=admin).json()["items"]) == 2


def test_a_workload_key_is_refused_and_nothing_written(client, admin, team_token):
    """``k8s-uid:<uid>`` is how the front door finds the job a workload made: a REST job
    with such a key would stand for another team's workload, which would never queue."""
    nlp = team_token("nlp")
    r = client.post("/v1/jobs", json=job_body(),
                    headers={**nlp, "Idempotency-Key": "k8s-uid:0b7c1d2e-aaaa-bbbb-cccc-1234"})
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith("Idempotency-Key: keys beginning 'k8s-uid:'")
    assert client.get("/v1/jobs", headers=admin).json()["items"] == []


def test_list_filters_and_cursor_pagination(client, admin):
    ids = []
    for i in range(7):
        team = "nlp" if i % 2 == 0 else "research"
        ids.append(
            client.post("/v1/jobs", json=job_body(f"j{i}", team), headers=admin).json()["id"]
        )
    seen, cursor, pages = [], None, 0
    while True:
        params = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        page = client.get("/v1/jobs", params=params, headers=admin).json()
        seen += [j["id"] for j in page["items"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == 3
    assert seen == list(reversed(ids))  # newest first, each exactly once
    nlp = client.get("/v1/jobs", params={"team": "nlp"}, headers=admin).json()["items"]
    assert {j["team"] for j in nlp} == {"nlp"} and len(nlp) == 4
    mixed = client.get("/v1/jobs", params={"pool": "mixed"}, headers=admin).json()["items"]
    assert {j["team"] for j in mixed} == {"research"}
    assert client.get("/v1/jobs", params={"status": "running"}, headers=admin).json()["items"] == []
    p1 = client.get("/v1/jobs", params={"priority": "P1"}, headers=admin).json()["items"]
    assert len(p1) == 4
    bad = client.get("/v1/jobs", params={"cursor": "!!nope"}, headers=admin)
    assert bad.status_code == 422 and bad.json()["detail"].startswith("cursor")
    # well-formed base64 of something that is not a job id (the id beyond a bigint was
    # answered "invalid value: bigint out of range", from the database)
    for raw in (b"id:99999999999999999999", b"id:-1", b"id: 5"):
        cur = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        bad = client.get("/v1/jobs", params={"cursor": cur}, headers=admin)
        assert bad.status_code == 422, (raw, bad.text)
        assert bad.json()["detail"].startswith("cursor: malformed cursor"), (raw, bad.text)
    bad = client.get("/v1/jobs", params={"status": "weird"}, headers=admin)
    assert bad.status_code == 422 and bad.json()["detail"].startswith("status")
    bad = client.get("/v1/jobs", params={"limit": 0}, headers=admin)
    assert bad.status_code == 422 and "limit" in bad.json()["detail"]


def test_team_token_cannot_see_or_cancel_other_teams_jobs(client, admin, team_token):
    nlp, research = team_token("nlp"), team_token("research")
    a = client.post("/v1/jobs", json=job_body("a", "nlp"), headers=nlp).json()
    b = client.post("/v1/jobs", json=job_body("b", "research"), headers=research).json()
    # submit for another team: forbidden, nothing written
    r = client.post("/v1/jobs", json=job_body("x", "research"), headers=nlp)
    assert r.status_code == 403 and r.json()["detail"].startswith("team")
    assert client.get(f"/v1/jobs/{b['id']}", headers=nlp).status_code == 404
    assert client.get(f"/v1/jobs/{b['id']}/events", headers=nlp).status_code == 404
    assert client.post(f"/v1/jobs/{b['id']}/cancel", headers=nlp).status_code == 404
    assert client.get(f"/v1/jobs/{b['id']}", headers=admin).json()["status"] == "pending"
    listed = client.get("/v1/jobs", headers=nlp).json()["items"]
    assert [j["id"] for j in listed] == [a["id"]]
    assert client.get("/v1/jobs", params={"team": "research"}, headers=nlp).status_code == 403
    assert client.get(f"/v1/jobs/{a['id']}", headers=nlp).status_code == 200
    assert len(client.get("/v1/jobs", headers=admin).json()["items"]) == 2


def test_auth_required_and_bad_tokens(client):
    assert client.get("/v1/jobs").status_code == 401
    r = client.get("/v1/jobs", headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401 and "Authorization" in r.json()["detail"]
    assert client.post("/v1/jobs", json=job_body()).status_code == 401


def test_cancel_pending_job_and_events(client, admin):
    j = client.post("/v1/jobs", json=job_body(), headers=admin).json()
    r = client.post(f"/v1/jobs/{j['id']}/cancel", headers=admin)
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    assert r.json()["finished_at"] is not None
    again = client.post(f"/v1/jobs/{j['id']}/cancel", headers=admin)
    assert again.status_code == 409
    events = client.get(f"/v1/jobs/{j['id']}/events", headers=admin).json()
    assert [e["type"] for e in events] == ["submitted", "cancelled"]
    assert events[1]["from_status"] == "pending" and events[1]["to_status"] == "cancelled"


def test_unknown_job_is_404(client, admin):
    assert client.get("/v1/jobs/999999", headers=admin).status_code == 404
    assert client.get("/v1/jobs/not-a-number", headers=admin).status_code == 404
    assert client.post("/v1/jobs/424242/cancel", headers=admin).status_code == 404


def test_wait_seconds_follows_the_clock(client, admin, clock):
    j = client.post("/v1/jobs", json=job_body(), headers=admin).json()
    clock.advance(42)
    assert client.get(f"/v1/jobs/{j['id']}", headers=admin).json()["wait_seconds"] == 42.0


def test_labels_are_checked_kept_and_never_silently_dropped(client, admin):
    base = {"name": "lab", "team": "nlp", "resources": {"gpus": 1}}
    for labels, named in (({"bad key!": "x"}, "bad key!"), ({"app": "no spaces"}, "labels.app"),
                          ({"gpuq.io/team": "x"}, "labels.gpuq.io/team")):
        r = client.post("/v1/jobs", json={**base, "labels": labels}, headers=admin)
        assert r.status_code == 422 and named in str(r.json()["detail"]), r.json()
    good = {"app": "sft", "example.com/experiment": "e-42", "empty": ""}
    r = client.post("/v1/jobs", json={**base, "labels": good}, headers=admin)
    assert r.status_code == 201, r.json()
    assert client.get(f"/v1/jobs/{r.json()['id']}", headers=admin).json()["spec"]["labels"] == good


def test_allow_mixed_types_is_taken_at_the_job_level_too(client, admin, dispatcher):
    """The job spec's ``allow_mixed_types`` is accepted beside ``topology`` as well as in
    ``resources`` (the old code refused it there: 422 "unknown field (did you mean
    allow_mixed_types?)"), and a gpu_units job then combines types."""
    # 145 CU of training's types: more than all its A100s (140 CU with the MIG slices)
    body = {"name": "mixed", "team": "nlp", "allow_mixed_types": True,
            "resources": {"gpu_units": 145}, "duration_estimate_s": 100}
    r = client.post("/v1/jobs", json=body, headers=admin)
    assert r.status_code == 201, r.text
    spec = r.json()["spec"]
    assert spec["resources"]["allow_mixed_types"] is True and "allow_mixed_types" not in spec
    dispatcher.run_once()
    got = client.get(f"/v1/jobs/{r.json()['id']}", headers=admin).json()
    assert got["status"] in ("admitted", "running"), got["reason"]
    assert {a["gpu_type"] for a in got["allocations"]} == {"a100-80g", "v100-16g"}
    # given in both places with different values: a 422 naming it, nothing written
    both = dict(body, name="both", resources={"gpu_units": 10, "allow_mixed_types": False})
    r = client.post("/v1/jobs", json=both, headers=admin)
    assert r.status_code == 422 and "allow_mixed_types" in r.json()["detail"]
    assert len(client.get("/v1/jobs", headers=admin).json()["items"]) == 1
