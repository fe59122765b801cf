"""Two dispatcher electors against real PostgreSQL: one leader, failover."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from app.dispatch.leader import LeaderElector, fence, libpq_dsn, lock_key
from tests.pg_server import own_database


@pytest.fixture(scope="module")
def db_url() -> Iterator[str]:
    """A database of our own for this run (dropped at the end)."""
    with own_database("gpuq_leader") as url:
        yield url


@pytest.fixture
def lock_name() -> str:
    return f"gpuq-dispatcher-{uuid.uuid4().hex[:8]}"  # advisory locks are cluster-wide


def _terminate(db_url: str, pid: int) -> None:
    with psycopg.connect(libpq_dsn(db_url), autocommit=True) as c:
        c.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))  # waits for the exit


def test_one_leader_and_failover_when_it_dies(db_url, lock_name):
    changes: list[tuple[str, bool]] = []
    a = LeaderElector(db_url, lock_name, on_change=lambda v: changes.append(("a", v)))
    b = LeaderElector(db_url, lock_name, on_change=lambda v: changes.append(("b", v)))
    try:
        assert a.ensure() is True
        assert b.ensure() is False
        assert a.ensure() is True and b.ensure() is False  # stable
        # the leader's session dies (process killed, connection cut)
        _terminate(db_url, a.backend_pid)
        assert b.ensure() is True  # PostgreSQL released the lock with the session
        assert a.ensure() is False  # the old leader notices and stands by
        assert changes == [("a", True), ("b", True), ("a", False)]
        assert a.ensure() is False and b.ensure() is True
    finally:
        a.release()
        b.release()


def test_release_hands_over_immediately(db_url, lock_name):
    a, b = LeaderElector(db_url, lock_name), LeaderElector(db_url, lock_name)
    try:
        assert a.ensure() and not b.ensure()
        a.release()
        assert not a.is_leader
        assert b.ensure()
    finally:
        a.release()
        b.release()


def test_many_replicas_exactly_one_leader(db_url, lock_name):
    electors = [LeaderElector(db_url, lock_name) for _ in range(4)]
    try:
        for _ in range(3):
            assert sum(e.ensure() for e in electors) == 1
    finally:
        for e in electors:
            e.release()


def test_unreachable_database_means_not_leader(lock_name):
    e = LeaderElector("postgresql+psycopg://nobody@127.0.0.1:1/none", lock_name,
                      connect_timeout_s=1)
    assert e.ensure() is False


def test_fence_excludes_a_second_cycle(db_url, lock_name):
    dsn = libpq_dsn(db_url)
    with psycopg.connect(dsn) as c1, psycopg.connect(dsn) as c2:
        assert fence(c1, lock_name) is True
        assert fence(c2, lock_name) is False  # c1's transaction holds it
        c1.commit()  # the xact lock ends with the transaction
        assert fence(c2, lock_name) is True
        c2.rollback()


def test_lock_key_is_stable_and_distinct():
    assert lock_key("gpuq-dispatcher") == lock_key("gpuq-dispatcher")
    assert lock_key("a") != lock_key("b")
    assert -(2**63) <= lock_key("x") < 2**63
