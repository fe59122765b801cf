"""The submit path: how many statements a submit sends, idempotency races, batch order."""

from __future__ import annotations

import threading
from contextlib import contextmanager

from fastapi.testclient import TestClient
from sqlalchemy import event, select

from app.main import create_app
from app.store.orm import JobEventRow, JobRow
from tests.integration.conftest import job_body


@contextmanager
def statements(engine):
    seen: list[str] = []

    def before(conn, cursor, statement, parameters, context, executemany):
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", before)


def test_one_statement_per_submit_with_a_warm_cache(client, admin, team_token, engine):
    nlp = team_token("nlp")
    assert client.post("/v1/jobs", json=job_body(name="warm"), headers=admin).status_code == 201
    # Tokens (the admin's too) live in the database and are cached per process with
    # the catalog revision they were read at; a submit with a cached one sends only
    # its INSERT, which writes nothing unless catalog_revision (which every token
    # write bumps) still has that number: a revocation is seen at once.
    with statements(engine) as seen:
        r = client.post("/v1/jobs", json=job_body(name="hot"), headers=admin)
    assert r.status_code == 201
    assert len(seen) == 1 and "INSERT INTO jobs" in seen[0], seen
    with statements(engine) as seen:  # a team token seen first: revision, lookup, insert
        r = client.post("/v1/jobs", json=job_body(name="cold"), headers=nlp)
    assert r.status_code == 201
    assert len(seen) == 3 and "api_tokens" in seen[1] and "INSERT INTO jobs" in seen[-1], seen
    with statements(engine) as seen:  # and once cached: the insert alone
        r = client.post("/v1/jobs", json=job_body(name="team"), headers=nlp)
    assert r.status_code == 201
    assert len(seen) == 1 and "INSERT INTO jobs" in seen[-1], seen
    body = r.json()
    assert body["status"] == "pending" and body["wait_seconds"] == 0 and body["allocations"] == []
    assert body["spec"]["name"] == "team" and body["units"] == 20  # 2 x a100-80g at 10 CU
    got = client.get(f"/v1/jobs/{body['id']}", headers=admin).json()
    assert {k: got[k] for k in body if k != "queue_position"} == {
        k: body[k] for k in body if k != "queue_position"
    }
    with engine.connect() as c:
        ev = c.execute(select(JobEventRow.type).where(JobEventRow.job_id == int(body["id"])))
        assert list(ev.scalars()) == ["submitted"]


def test_a_cached_token_revoked_elsewhere_cannot_submit(services, admin, engine):
    """Two replicas: b caches the token by submitting with it; a revokes it; b's next
    submit (which reads nothing before its INSERT) is refused and writes nothing."""
    with TestClient(create_app(services=services)) as a, \
            TestClient(create_app(services=services)) as b:
        r = a.post("/v1/tokens", json={"scope": "team:nlp", "name": "ci"}, headers=admin)
        assert r.status_code == 201, r.text
        tok = r.json()
        h = {"Authorization": f"Bearer {tok['token']}"}
        assert b.post("/v1/jobs", json=job_body(name="before"), headers=h).status_code == 201
        assert b.post("/v1/jobs", json=job_body(name="cached"), headers=h).status_code == 201
        assert a.post(f"/v1/tokens/{tok['id']}/revoke", headers=admin).status_code == 200
        r = b.post("/v1/jobs", json=job_body(name="after"), headers=h)
        assert r.status_code == 401 and "revoked" in r.json()["detail"]
        # a catalog change that leaves the token valid: refused once by the revision
        # guard, then written after a fresh lookup, once
        h2 = {"Authorization": f"Bearer {new_team_token(a, admin)}"}
        assert b.post("/v1/jobs", json=job_body(name="c1"), headers=h2).status_code == 201
        assert a.post("/v1/tokens", json={"scope": "team:recsys"}, headers=admin).status_code \
            == 201
        with statements(engine) as seen:
            r = b.post("/v1/jobs", json=job_body(name="c2"), headers=h2)
        assert r.status_code == 201, r.text
        assert any("api_tokens" in st for st in seen), seen  # looked up afresh
    with engine.connect() as c:
        names = list(c.execute(select(JobRow.name).order_by(JobRow.id)).scalars())
    assert names.count("after") == 0 and names.count("c2") == 1
    assert names.count("cached") == 1


def new_team_token(client, admin) -> str:
    r = client.post("/v1/tokens", json={"scope": "team:nlp"}, headers=admin)
    assert r.status_code == 201, r.text
    return r.json()["token"]


def test_a_team_token_may_not_submit_for_another_team(client, team_token):
    r = client.post("/v1/jobs", json=job_body(team="recsys"), headers=team_token("nlp"))
    assert r.status_code == 403
    assert client.post("/v1/jobs", json=job_body()).status_code == 401


def test_same_key_from_racing_requests_makes_one_job(client, admin, engine):
    key = {**admin, "Idempotency-Key": "ci-shard-7"}
    answers: list = []

    def submit() -> None:
        answers.append(client.post("/v1/jobs", json=job_body(name="shard"), headers=key))

    threads = [threading.Thread(target=submit) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.status_code for r in answers) == [200] * 5 + [201]
    assert len({r.json()["id"] for r in answers}) == 1
    with engine.connect() as c:
        assert c.scalar(select(JobRow.id).where(JobRow.idempotency_key == "ci-shard-7"))
    r = client.post("/v1/jobs", json=job_body(name="other"), headers=key)
    assert r.status_code == 409 and "Idempotency-Key" in r.json()["detail"]


def test_batch_ids_follow_the_body_order(client, admin, engine):
    names = [f"b{i}" for i in range(80)]  # the test app's body limit is 20 kB
    teams = ("nlp", "research")
    body = {"jobs": [job_body(name=n, team=teams[i % 2]) for i, n in enumerate(names)]}
    with statements(engine) as seen:
        r = client.post("/v1/jobs:batch", json=body, headers=admin)
    assert r.status_code == 201, r.text
    assert len([s for s in seen if "INSERT" in s]) == 1
    items = r.json()["items"]
    assert [i["name"] for i in items] == names
    with engine.connect() as c:
        rows = dict(
            c.execute(select(JobRow.id, JobRow.name).where(JobRow.name.in_(names))).all()
        )
        events = c.scalar(
            select(JobEventRow.id).where(JobEventRow.job_id == int(items[-1]["id"]))
        )
    assert {int(i["id"]): i["name"] for i in items} == rows
    assert events is not None
    bad = {"jobs": [job_body(name="ok"), job_body(name="bad", team="nobody")]}
    r = client.post("/v1/jobs:batch", json=bad, headers=admin)
    assert r.status_code == 422 and r.json()["detail"].startswith("jobs[1].team")
