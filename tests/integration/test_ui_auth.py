"""The dashboard takes a token and shows only what it may see,
and the Teams, Nodes and job pages show the live state.

Real API, real PostgreSQL, the simulated cluster; no mocks.
"""

from __future__ import annotations

import re

import pytest

from app.store.orm import JobRow
from app.store.state_changes import change_state
from tests.integration.obs_env import AUTH, job, seeded_env


@pytest.fixture(scope="module")
def env():
    with seeded_env() as e:
        ids = {}
        for spec in (
            job("train-a", "nlp", 2, "a100", duration=600),
            job("serve-b", "cv", 1, "v100", duration=600),
            # the longer estimate keeps it behind train-a under shortest-first too
            job("train-wait", "nlp", 3, "a100", duration=3600),
            job("cv-wait", "cv", 4, "v100", pool="inference", duration=3600),
        ):
            ids[spec["name"]] = e.submit(spec)["id"]
        e.advance(5)
        e.dispatch()
        r = e.client.post("/v1/teams/nlp/tokens", headers=AUTH)
        assert r.status_code == 201, r.text
        e.nlp = {"Authorization": f"Bearer {r.json()['token']}"}
        e.ids = ids
        yield e


def text(html: str) -> str:
    return re.sub(r"<[^>]+>", " ", html)


def test_no_token_redirects_to_login_and_public_mode_is_read_only(env):
    c = env.client
    c.cookies.clear()
    r = c.get("/ui/jobs?team=cv", follow_redirects=False)
    assert (
        r.status_code == 303 and r.headers["location"] == "/ui/login?next=%2Fui%2Fjobs%3Fteam%3Dcv"
    )
    r = c.get("/ui/jobs", headers={"Authorization": "Bearer nope"}, follow_redirects=False)
    assert r.status_code == 303 and "error=1" in r.headers["location"]
    settings = c.app.state.settings
    c.app.state.settings = settings.model_copy(update={"ui_public": True})
    try:
        r = c.get(f"/ui/jobs/{env.ids['train-wait']}")
        assert r.status_code == 200 and "public read-only" in r.text
        assert 'id="cancel"' not in r.text
        r = c.post(f"/ui/jobs/{env.ids['train-wait']}/cancel", data={"csrf": ""})
        assert r.status_code == 401
    finally:
        c.app.state.settings = settings


def test_login_sets_a_cookie_that_lets_pages_load(env):
    c = env.client
    c.cookies.clear()
    r = c.post("/ui/login", data={"token": "wrong", "next": "/ui/teams"})
    assert r.status_code == 401 and "unknown, expired or revoked" in r.text
    token = env.nlp["Authorization"].split()[1]
    r = c.post(
        "/ui/login", data={"token": token, "next": "https://evil.example/"}, follow_redirects=False
    )
    assert r.status_code == 303 and r.headers["location"] == "/ui"  # never off-site
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/ui" in cookie
    r = c.get("/ui/teams")
    assert r.status_code == 200 and "team nlp" in r.text
    c.cookies.clear()


def test_team_token_sees_only_its_team(env):
    c = env.client
    jobs = text(c.get("/ui/jobs", headers=env.nlp).text)
    assert "train-a" in jobs and "train-wait" in jobs and "serve-b" not in jobs
    # asking for another team's jobs still shows only its own
    assert "serve-b" not in c.get("/ui/jobs?team=cv", headers=env.nlp).text
    assert c.get(f"/ui/jobs/{env.ids['serve-b']}", headers=env.nlp).status_code == 404
    queue = c.get("/ui/queue", headers=env.nlp).text
    assert "train-wait" in queue and "cv-wait" not in queue
    assert "1 pending job of other teams is counted" in text(queue)
    # naming another team shows nothing of it, not even its count (as GET /v1/queue)
    other = text(c.get("/ui/queue?team=cv", headers=env.nlp).text)
    assert "cv-wait" not in other and "other teams" not in other and "(1 pending)" not in other
    assert "(0 pending)" in other
    teams = text(c.get("/ui/teams", headers=env.nlp).text)
    assert "nlp" in teams and " cv " not in teams
    nodes = c.get("/ui/nodes", headers=env.nlp).text
    assert f'href="/ui/jobs/{env.ids["train-a"]}"' in nodes
    assert f'href="/ui/jobs/{env.ids["serve-b"]}"' not in nodes and "another team" in nodes
    # the admin sees everyone
    assert "serve-b" in c.get("/ui/jobs", headers=AUTH).text
    assert "cv-wait" in c.get("/ui/queue", headers=AUTH).text


def test_teams_page_numbers(env):
    page = env.client.get("/ui/teams", headers=AUTH).text
    row = page[page.index('data-team="nlp"') :].split("</tr>")[0]
    cells = [text("<td" + c).strip() for c in row.split("<td")[1:]]
    # team, pool, weight, type, quota, used, borrowed, lent, total, dominant share, of the
    # cluster, fair-share key, pending, ...
    assert cells[0] == "nlp" and cells[1] == "training" and cells[3] == "a100"
    assert cells[5] == "20"  # two A100 cards at 10 CU
    assert cells[8].startswith("20 / 1,000")
    assert cells[9].split() == ["50%", "a100"]  # dominant share: half the A100 cards
    assert cells[11] == "20"  # the fair-share key: 20 CU / weight 1
    assert cells[12] == "1"  # train-wait


def test_nodes_page_cards_mig_and_cordon(env):
    c = env.client
    r = c.patch("/v1/nodes/v100-0", json={"schedulable": False}, headers=AUTH)
    assert r.status_code == 200, r.text
    try:
        page = c.get("/ui/nodes", headers=AUTH).text
        a100 = page[page.index('data-node="a100-0"') :].split('class="node')[0]
        assert "3g.40gb: free" in a100 and "train-a</a> r0" in a100
        assert a100.count('class="card busy"') == 2  # devices 2 and 3 (0 holds MIG slices)
        v100 = page[page.index('data-node="v100-0"') :]
        assert "cordoned" in v100.split("</h3>")[0] and "serve-b" in v100
    finally:
        c.patch("/v1/nodes/v100-0", json={"schedulable": True}, headers=AUTH)


def test_cancel_from_the_job_page(env):
    c = env.client
    jid = env.ids["train-wait"]
    page = c.get(f"/ui/jobs/{jid}", headers=env.nlp).text
    assert 'id="cancel"' in page
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page).group(1)
    # another team's job: not found, nothing cancelled
    r = c.post(f"/ui/jobs/{env.ids['cv-wait']}/cancel", data={"csrf": csrf}, headers=env.nlp)
    assert r.status_code == 404
    # a form without the key (cross-site) is refused
    r = c.post(f"/ui/jobs/{jid}/cancel", data={"csrf": "0" * 32}, headers=env.nlp)
    assert r.status_code == 403
    assert env.get(f"/v1/jobs/{jid}")["status"] == "pending"
    r = c.post(
        f"/ui/jobs/{jid}/cancel", data={"csrf": csrf}, headers=env.nlp, follow_redirects=False
    )
    assert r.status_code == 303 and r.headers["location"] == f"/ui/jobs/{jid}?cancelled=1"
    assert env.get(f"/v1/jobs/{jid}")["status"] == "cancelled"
    page = c.get(r.headers["location"], headers=env.nlp).text
    assert "cancel requested" in page and 'id="cancel"' not in page
    assert env.get(f"/v1/jobs/{env.ids['cv-wait']}")["status"] == "pending"


def test_an_unschedulable_job_can_be_cancelled_from_its_page(env):
    """The page offers cancel for every state the API cancels (domain CANCELLABLE); it
    kept its own list without ``unschedulable``, so such a job had no cancel button."""
    c = env.client
    jid = env.submit(job("never", "nlp", 1, "a100", duration=60))["id"]
    with env.services.session_factory() as s:
        row = s.get(JobRow, int(jid))
        change_state(s, row, "unschedulable", now=env.clock(), reason="never fits")
        s.commit()
    page = c.get(f"/ui/jobs/{jid}", headers=env.nlp).text
    assert 'id="cancel"' in page
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page).group(1)
    r = c.post(f"/ui/jobs/{jid}/cancel", data={"csrf": csrf}, headers=env.nlp,
               follow_redirects=False)
    assert r.status_code == 303
    assert env.get(f"/v1/jobs/{jid}")["status"] == "cancelled"
