"""Pooled connections are checked only after they sat idle (no round trip per request),
and a database that dropped them costs at most one failed statement per connection pool."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import create_engine, exc, text

from app.store.db import normalize_url, ping_when_idle


def backend_pid(engine) -> int:
    with engine.connect() as c:
        return c.scalar(text("SELECT pg_backend_pid()"))


def kill(admin, pid: int) -> None:
    with admin.connect() as c:
        c.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
        c.commit()
    time.sleep(0.2)


@pytest.fixture
def engines(database_url, request):
    url = normalize_url(database_url)
    engine = create_engine(url, pool_size=1, max_overflow=0)
    ping_when_idle(engine, idle_s=request.param)
    admin = create_engine(url)
    yield engine, admin
    engine.dispose()
    admin.dispose()


@pytest.mark.parametrize("engines", [0.3], indirect=True)
def test_an_idle_connection_that_died_is_replaced_before_use(engines):
    engine, admin = engines
    pid = backend_pid(engine)
    kill(admin, pid)
    time.sleep(0.4)  # idle past the threshold: pinged on checkout, found dead, replaced
    assert backend_pid(engine) != pid


@pytest.mark.parametrize("engines", [60.0], indirect=True)
def test_a_busy_connection_is_not_pinged_and_fails_once(engines):
    engine, admin = engines
    pid = backend_pid(engine)
    kill(admin, pid)  # used a moment ago: taken as alive (no ping round trip)
    with pytest.raises(exc.OperationalError), engine.connect() as c:
        c.execute(text("SELECT 1"))
    assert backend_pid(engine) != pid  # the pool was replaced: the next one works
