"""A team token sees only its own team's jobs, also where jobs appear beside shared
objects: node allocations, borrow leases and pools' usage (they showed other teams' job
ids), and job ids in paths are the documented ASCII digits (``%201`` and ``١`` read as job 1)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from sqlalchemy import text

from app.store.orm import LeaseRow
from tests.integration.conftest import job_body


def running_nlp_job(client, admin, dispatcher) -> str:
    r = client.post("/v1/jobs", json=job_body(), headers=admin)
    assert r.status_code == 201, r.text
    dispatcher.run_once()
    return r.json()["id"]


def node_job_ids(client, headers) -> set:
    nodes = client.get("/v1/nodes", headers=headers).json()
    return {a["job_id"] for n in nodes for a in n["allocations"]}


def test_nodes_hide_other_teams_job_ids(client, admin, team_token, dispatcher):
    jid = running_nlp_job(client, admin, dispatcher)
    assert node_job_ids(client, admin) == {jid}
    assert node_job_ids(client, team_token("nlp")) == {jid}
    assert node_job_ids(client, team_token("recsys")) == {None}  # used, not by whom
    node = next(n for n in client.get("/v1/nodes", headers=admin).json() if n["allocations"])
    one = client.get(f"/v1/nodes/{node['name']}", headers=team_token("recsys")).json()
    assert [a["job_id"] for a in one["allocations"]] == [None]
    assert one["free"] == node["free"]


def test_leases_hide_other_teams_job_ids(client, admin, team_token, dispatcher,
                                         session_factory, clock):
    jid = running_nlp_job(client, admin, dispatcher)
    with session_factory() as s:  # a lease row as a borrowing admission writes it
        s.add(LeaseRow(borrower="training", lender="mixed", gpu_type="a100-80g", units=20,
                       job_id=int(jid), started_at=clock(),
                       expires_at=clock() + timedelta(seconds=1800), state="active"))
        s.commit()
    assert [x["job_id"] for x in client.get("/v1/leases", headers=admin).json()] == [jid]
    nlp = client.get("/v1/leases", headers=team_token("nlp")).json()
    assert [x["job_id"] for x in nlp] == [jid]
    recsys = client.get("/v1/leases", headers=team_token("recsys")).json()
    assert [(x["job_id"], x["borrower"], x["units"]) for x in recsys] == [(None, "training", 20)]
    # the same leases in both pools' usage (it named the job to every token)
    for pool in ("training", "mixed"):
        def usage(headers, pool=pool):
            r = client.get(f"/v1/pools/{pool}/usage", headers=headers)
            assert r.status_code == 200, r.text
            return [(x["job_id"], x["units"]) for x in r.json()["leases"]]
        assert usage(admin) == usage(team_token("nlp")) == [(jid, 20)]
        assert usage(team_token("recsys")) == [(None, 20)]


def test_job_id_paths_are_ascii_digits(client, admin, dispatcher):
    jid = running_nlp_job(client, admin, dispatcher)
    assert jid == "1"
    assert client.get("/v1/jobs/1", headers=admin).status_code == 200
    for bad in ("%201", "1%20", "\u0661", "+1", "01x", "1" * 19):
        r = client.get(f"/v1/jobs/{bad}", headers=admin)
        assert r.status_code == 404, (bad, r.status_code)
        r = client.post(f"/v1/jobs/{bad}/cancel", headers=admin)
        assert r.status_code == 404, (bad, r.status_code)
    assert client.get("/v1/jobs/1", headers=admin).json()["status"] != "cancelled"


def test_a_cancel_of_another_teams_job_neither_reads_nor_locks_it(client, admin, team_token,
                                                                 engine):
    """The 404 came after a SELECT ... FOR UPDATE of the other team's row: while the
    dispatcher (here: another connection) held that row, the cancel waited for it, and
    the wait told that the job was being changed."""
    r = client.post("/v1/jobs", json=job_body(), headers=admin)
    jid = r.json()["id"]
    recsys = team_token("recsys")
    got: dict = {}
    waited = False
    with engine.connect() as holder, engine.connect() as watch:
        holder.execute(text("SELECT id FROM jobs WHERE id = :id FOR UPDATE"), {"id": int(jid)})
        t = threading.Thread(target=lambda: got.update(
            r=client.post(f"/v1/jobs/{jid}/cancel", headers=recsys)))
        t.start()
        cap = time.monotonic() + 10  # the lock is released by then whatever happens
        while t.is_alive() and time.monotonic() < cap and not waited:
            waited = bool(watch.execute(text(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()")).scalar())
            watch.rollback()
            time.sleep(0.01)
        holder.rollback()
    t.join(10)
    assert not waited
    assert got["r"].status_code == 404
    assert client.get(f"/v1/jobs/{jid}", headers=admin).json()["status"] == "pending"


def test_a_team_reads_its_own_team_only(client, admin, team_token):
    """/v1/teams listed every team's quota, namespaces and ServiceAccounts to any token,
    and a 404 for a mistyped name listed every team's name."""
    names = {t["name"] for t in client.get("/v1/teams", headers=admin).json()}
    assert {"nlp", "recsys"} <= names
    nlp = team_token("nlp")
    assert [t["name"] for t in client.get("/v1/teams", headers=nlp).json()] == ["nlp"]
    assert client.get("/v1/teams/nlp", headers=nlp).status_code == 200
    for name in ("recsys", "no-such-team"):  # another team is answered as one that is not
        r = client.get(f"/v1/teams/{name}", headers=nlp)
        assert r.status_code == 404, r.text
        assert r.json()["detail"] == f"team {name!r} not found"
    assert client.get("/v1/teams/recsys", headers=admin).status_code == 200


def test_a_teams_fairness_report_covers_its_own_jobs(client, admin, team_token):
    """The fairness report (API and dashboard) showed every team's waits to any token."""
    for team in ("nlp", "recsys"):
        r = client.post("/v1/jobs", json=job_body(name=f"w-{team}", team=team), headers=admin)
        assert r.status_code == 201, r.text

    def teams_in(headers):
        rep = client.get("/v1/reports/fairness", headers=headers).json()
        return {g["key"] for g in rep["groups"]["team"]}, rep["overall"]["jobs"]

    assert teams_in(admin) == ({"nlp", "recsys"}, 2)
    assert teams_in(team_token("nlp")) == ({"nlp"}, 1)
    assert teams_in(team_token("recsys")) == ({"recsys"}, 1)
    page = client.get("/ui/fairness", headers=team_token("nlp"))
    assert page.status_code == 200 and "nlp" in page.text and "recsys" not in page.text
