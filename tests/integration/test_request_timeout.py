"""``GPUQ_REQUEST_TIMEOUT`` bounds the whole request, not each statement:
the wait for a pooled connection and every statement get what is
left of the request's budget, and a request past it answers 503 with
``Retry-After``.

The request's clock (``app.state.monotonic``) is moved forward by the test: a
request that has "already used" 29.5 s of its 30 s. Another connection holds a
lock (or the only pooled connection) until the answer arrives, or until a cap
of several seconds. Before the fix the blocked statement ran under a fresh 30 s
``statement_timeout`` (and the pool wait under its own 20 s timeout), so it
waited for the cap and answered 200; now it answers 503 as soon as the budget
is spent, while the lock is still held. Nothing here measures time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.clock import utcnow
from app.main import create_app
from app.runtime import Services
from app.store.db import make_engine, make_session_factory
from tests.faults import admin_conninfo
from tests.integration.conftest import ADMIN_TOKEN, job_body

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
TIMEOUT_S = 30.0
CAP_S = 8.0  # the lock is released by then whatever happens


def used(seconds: float) -> Callable[[], float]:
    """A request clock: the budget starts at 1000, every later reading is
    ``seconds`` later (the request has used that much by its first statement)."""
    calls = [0]

    def clock() -> float:
        calls[0] += 1
        return 1000.0 if calls[0] == 1 else 1000.0 + seconds

    return clock


@pytest.fixture
def small_engine(database_url, demo):
    # one pooled connection and a pool timeout far above the cap: only the budget
    # can make a request give up waiting
    eng = make_engine(database_url, pool_size=1, max_overflow=0, pool_timeout_s=20,
                      statement_timeout_s=TIMEOUT_S)
    yield eng
    eng.dispose()


@pytest.fixture
def timed_client(settings, small_engine) -> Iterator[TestClient]:
    s = settings.model_copy(update={"request_timeout_s": TIMEOUT_S})
    services = Services(settings=s, engine=small_engine,
                        session_factory=make_session_factory(small_engine), cluster=None,
                        clock=utcnow, admin_token=ADMIN_TOKEN)
    with TestClient(create_app(services=services)) as c:
        assert c.get("/v1/teams/nlp", headers=ADMIN).status_code == 200  # token cached
        yield c


def held_lock(database_url: str, table: str) -> psycopg.Connection:
    conn = psycopg.connect(admin_conninfo(database_url))
    conn.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
    return conn


def release_at_cap(release: Callable[[], None]) -> threading.Timer:
    timer = threading.Timer(CAP_S, release)
    timer.start()
    return timer


@pytest.mark.parametrize(
    ("method", "path", "table"),
    [
        ("GET", "/v1/teams/nlp", "teams"),
        ("GET", "/v1/jobs", "jobs"),
        ("POST", "/v1/jobs", "jobs"),  # the autocommit hot path
    ],
)
def test_a_statement_gets_only_what_is_left(timed_client, small_engine, database_url,
                                           method, path, table):
    timed_client.app.state.monotonic = used(TIMEOUT_S - 0.5)
    lock = held_lock(database_url, table)
    timer = release_at_cap(lock.rollback)
    try:
        r = timed_client.request(method, path, headers=ADMIN,
                                 json=job_body() if method == "POST" else None)
        still_held = timer.is_alive()
    finally:
        timer.cancel()
        lock.rollback()
        lock.close()
    assert still_held, "the answer came only once the lock was released"
    assert r.status_code == 503, r.text
    assert r.json() == {"detail": "database busy, retry"}
    assert r.headers["retry-after"].isdigit()
    # the shortened timeout did not stay on the pooled connection
    with small_engine.connect() as conn:
        assert conn.execute(text("SHOW statement_timeout")).scalar() == "30s"
    del timed_client.app.state.monotonic
    assert timed_client.get("/v1/teams/nlp", headers=ADMIN).status_code == 200


def test_the_pool_wait_gets_only_what_is_left(timed_client, small_engine):
    timed_client.app.state.monotonic = used(TIMEOUT_S - 0.5)
    held = small_engine.connect()  # the only pooled connection
    held.execute(text("SELECT 1"))
    timer = release_at_cap(held.close)
    try:
        r = timed_client.get("/v1/teams/nlp", headers=ADMIN)
        still_held = timer.is_alive()
    finally:
        timer.cancel()
        held.close()
    assert still_held, "the answer came only once the connection was free"
    assert r.status_code == 503, r.text
    assert r.json() == {"detail": "database busy, retry"}
    assert r.headers["retry-after"].isdigit()


def test_a_spent_budget_sends_nothing(timed_client, database_url):
    timed_client.app.state.monotonic = used(TIMEOUT_S + 1)
    r = timed_client.post("/v1/jobs", headers=ADMIN, json=job_body())
    assert r.status_code == 503, r.text
    assert r.headers["retry-after"].isdigit()
    del timed_client.app.state.monotonic
    assert timed_client.get("/v1/jobs", headers=ADMIN).json()["items"] == []

