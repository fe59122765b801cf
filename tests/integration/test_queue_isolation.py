"""A team token sees only its own team's entries in GET /v1/queue
(the API half; the pages: test_ui_auth.py): positions stay places in the one queue, other teams'
entries are counted (positions, X-Queue-Other-Teams), never shown. It used to
list every team's pending jobs (id, name, team, reason) while GET
/v1/jobs/{id} answered 404 for the same jobs."""

from __future__ import annotations

from tests.integration.conftest import job_body


def test_team_token_sees_only_its_entries_at_their_global_positions(
    client, admin, team_token, dispatcher, clock
):
    nlp = team_token("nlp")
    big = {"gpus": 8, "gpu_types": ["a100-80g"]}  # nothing fits twice: a queue forms
    ids = {}
    for name, team in [("r1", "research"), ("n1", "nlp"), ("r2", "research"), ("n2", "nlp")]:
        r = client.post(
            "/v1/jobs", json=job_body(name, team=team, resources=big, priority="P2"),
            headers=admin,
        )
        assert r.status_code == 201, r.text
        ids[name] = r.json()["id"]
        clock.advance(1)
    for _ in range(3):
        client.post("/v1/jobs", json=job_body("fill", resources=big, priority="P0"),
                    headers=admin)
    dispatcher.run_once()
    everything = client.get("/v1/queue", headers=admin)
    assert "x-queue-other-teams" not in everything.headers  # the admin sees everything
    full = {i["id"]: i["position"] for i in everything.json()}
    assert {ids["r1"], ids["n1"], ids["r2"], ids["n2"]} <= set(full)

    mine = client.get("/v1/queue", headers=nlp)
    assert mine.status_code == 200
    assert {i["team"] for i in mine.json()} == {"nlp"}
    nlp_entries = {i["id"] for i in everything.json() if i["team"] == "nlp"}
    assert {ids["n1"], ids["n2"]} <= nlp_entries
    assert {i["id"]: i["position"] for i in mine.json()} == {k: full[k] for k in nlp_entries}
    others = sum(1 for i in everything.json() if i["team"] != "nlp")
    assert mine.headers["x-queue-other-teams"] == str(others) and others >= 2
    text = mine.text
    assert "r1" not in text and "research" not in text
    # asking for another team's entries shows nothing
    assert client.get("/v1/queue", params={"team": "research"}, headers=nlp).json() == []
    # ... and a malformed cursor is refused there too (was 200 [], found by pytest -m long_fuzz)
    bad = client.get("/v1/queue", params={"team": "research", "cursor": "\u00de"}, headers=nlp)
    assert bad.status_code == 422 and bad.json()["detail"].startswith("cursor: malformed"), bad.text
    # the admin's team filter lists that team's entries in order
    research = client.get("/v1/queue", params={"team": "research"}, headers=admin).json()
    assert [i["id"] for i in research][:2] == [ids["r1"], ids["r2"]]
