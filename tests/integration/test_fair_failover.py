"""A team's deficit survives a leader change.

The deficit (what a team short of its entitlement is owed, app/scheduling/deficit.py)
builds up over hours; a new leader that started from zero made a team that had waited
hours wait for its credit again. Two dispatchers on one database stand for the old and
the new leader.
"""

from __future__ import annotations

import pytest

from app.dispatch.dispatcher import Dispatcher
from app.store.fair_state import read_fair
from tests.integration.conftest import job_body


def _submit(client, admin, **kw) -> str:
    r = client.post("/v1/jobs", json=job_body(**kw), headers=admin)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _waiting_team(client, admin, dispatcher, clock) -> str:
    """nlp fills the A100s up to its quota (15 of 16 cards, long jobs); research's 2-card
    A100 job cannot fit and waits, short of its entitlement (P2: no preemption)."""
    a = ["a100-80g"]
    _submit(client, admin, name="n8", team="nlp", resources={"gpus": 8, "gpu_types": a},
            duration_estimate_s=100_000)
    _submit(client, admin, name="n7", team="nlp", resources={"gpus": 7, "gpu_types": a},
            duration_estimate_s=100_000)
    clock.advance(1)
    dispatcher.run_once()
    jid = _submit(client, admin, name="r2", team="research",
                  resources={"gpus": 2, "gpu_types": a}, duration_estimate_s=600)
    for _ in range(20):
        clock.advance(60)
        dispatcher.run_once()
    got = client.get(f"/v1/jobs/{jid}", headers=admin).json()
    assert got["status"] == "pending", got
    return jid


def test_new_leader_starts_from_the_deficit_the_old_one_left(
    client, admin, dispatcher, session_factory, cluster, clock
) -> None:
    _waiting_team(client, admin, dispatcher, clock)
    old = dispatcher.planner.fair
    assert old is not None and old.deficit.get("research", 0.0) > 0  # owed after 20 min
    with session_factory() as s:
        stored = read_fair(s)
    assert stored == old  # written with the pass

    # the old leader is gone; a new one takes over a minute later
    new = Dispatcher(session_factory, cluster, clock=clock)
    clock.advance(60)
    new.run_once()
    fair = new.planner.fair
    assert fair is not None
    # decayed over the minute and credited for it: at least what the old leader left
    # (before: the new leader's first cycle gave research 0)
    assert fair.deficit.get("research", 0.0) == pytest.approx(
        old.deficit["research"], rel=0.05)
    assert fair.deficit["research"] >= old.deficit["research"]


def test_first_leader_on_an_empty_database_starts_at_zero(
    client, admin, dispatcher, session_factory, clock
) -> None:
    with session_factory() as s:
        assert read_fair(s) is None
    clock.advance(1)
    dispatcher.run_once()
    fair = dispatcher.planner.fair
    assert fair is not None and not fair.deficit
