"""GET /v1/queue a page at a time: the pages, joined, are the whole queue in dispatch order."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from app.store.orm import JobRow, QueueOrderRow
from tests.integration.obs_env import AUTH, job, seeded_env


@pytest.fixture(scope="module")
def env():
    with seeded_env() as e:
        for i in range(60):  # a node's worth each (a100-0: 3 whole + a MIG-cut card): most wait
            team = ("nlp", "cv")[i % 2]
            kind = "v100" if team == "cv" else ("a100", "v100")[i % 3 == 0]
            e.submit(job(f"a{i}", team, 3 if kind == "a100" else 4, kind))
            e.advance(1)
        e.dispatch()  # ranks the queue (queue_order)
        for i in range(15):  # submitted after the cycle: not ranked yet
            e.submit(job(f"b{i}", ("nlp", "cv")[i % 2], 1, "v100"))
            e.advance(1)
        with e.services.session_factory() as s:
            ranked = s.get(QueueOrderRow, 1).job_ids
        for jid in ranked[3:20:4]:  # some ranked jobs leave the queue
            r = e.client.post(f"/v1/jobs/{jid}/cancel", headers=AUTH)
            assert r.status_code == 200
        yield e


def expected(env, pool=None, team=None) -> list[str]:
    """The unpaged order: rank in the last cycle's order, then submit time, then id."""
    with env.services.session_factory() as s:
        order = {jid: k for k, jid in enumerate(s.get(QueueOrderRow, 1).job_ids)}
        rows = s.execute(
            select(JobRow.id, JobRow.submitted_at, JobRow.pool, JobRow.team).where(
                JobRow.status == "pending"
            )
        ).all()
    rows = [r for r in rows if pool in (None, r.pool) and team in (None, r.team)]
    rows.sort(key=lambda r: (order.get(r.id, len(order)), r.submitted_at, r.id))
    return [str(r.id) for r in rows]


def walk(env, limit: int, **params) -> list[dict]:
    items, cursor, pages = [], None, 0
    while True:
        q = {"limit": limit, **params, **({"cursor": cursor} if cursor else {})}
        r = env.client.get("/v1/queue", params=q, headers=AUTH)
        assert r.status_code == 200, r.text
        body = r.json()
        assert isinstance(body, list) and len(body) <= limit
        items += body
        pages += 1
        cursor = r.headers.get("x-next-cursor")
        if cursor is None:
            assert "link" not in r.headers
            return items
        assert len(body) == limit
        assert r.headers["link"].endswith('>; rel="next"') and cursor in r.headers["link"]
        assert pages < 100


@pytest.mark.parametrize("limit", [1, 7, 25, 500])
@pytest.mark.parametrize("flt", [{}, {"team": "cv"}, {"pool": "training", "team": "nlp"}])
def test_pages_join_to_the_whole_queue(env, limit, flt):
    items = walk(env, limit, **flt)
    want = expected(env, **flt)
    assert len(want) > 10
    assert [i["id"] for i in items] == want
    assert [i["position"] for i in items] == list(range(1, len(want) + 1))


def test_the_unranked_tail_comes_after_the_ranked_jobs(env):
    names = [i["name"] for i in walk(env, 10)]
    first_b = min(k for k, n in enumerate(names) if n.startswith("b"))
    assert all(n.startswith("b") for n in names[first_b:])
    assert [n for n in names if n.startswith("b")] == [f"b{i}" for i in range(15)]


def test_default_page_and_bad_cursor(env):
    r = env.client.get("/v1/queue", headers=AUTH)
    assert r.status_code == 200 and len(r.json()) == len(expected(env))  # < 100: one page
    r = env.client.get("/v1/queue", params={"cursor": "nonsense"}, headers=AUTH)
    assert r.status_code == 422 and "cursor" in r.json()["detail"]
    r = env.client.get("/v1/queue", params={"limit": 0}, headers=AUTH)
    assert r.status_code == 422


def test_dashboard_queue_pages(env):
    r = env.client.get("/ui/queue", headers=AUTH)  # the dashboard takes a token
    assert r.status_code == 200 and "Queue (" in r.text
    first = env.client.get("/v1/queue", params={"limit": 100}, headers=AUTH).json()
    assert f"/ui/jobs/{first[0]['id']}" in r.text
    r = env.client.get("/ui/queue", params={"cursor": "nonsense"}, headers=AUTH)
    assert r.status_code == 422
