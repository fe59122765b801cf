"""Leader election for dispatcher replicas with a PostgreSQL advisory lock.

Any number of dispatchers may run; only the holder of a session-level
advisory lock dispatches. The lock lives on a dedicated connection, so it
is released by PostgreSQL itself when the leader dies (process killed, node
lost, connection cut): no lease renewals, no clock skew. Leadership is
re-checked at the start of every cycle (:meth:`LeaderElector.ensure`), and
the cycle's write transaction can additionally take a transaction-level
lock (:func:`fence`) so two cycles never commit at once even in the
instant between a leader losing its connection and noticing it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Callable
from typing import Any

import psycopg
from sqlalchemy import text

from app.store.db import normalize_url, psycopg_conninfo

log = logging.getLogger(__name__)


def lock_key(name: str) -> int:
    """A stable signed 64-bit key for ``pg_*_advisory_lock`` from a name."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


def libpq_dsn(url: str) -> str:
    """SQLAlchemy URL (``postgresql+psycopg://...``) -> a libpq connection string."""

    return psycopg_conninfo(normalize_url(url))


class LeaderElector:
    """Hold ``pg_try_advisory_lock(key)`` on one connection while leader.

    ``on_change(is_leader)`` is called on every transition (e.g. to reconcile
    the cluster when leadership is gained).
    """

    def __init__(
        self,
        database_url: str,
        name: str = "gpuq-dispatcher",
        *,
        on_change: Callable[[bool], None] | None = None,
        connect_timeout_s: int = 5,
    ) -> None:
        self.dsn = libpq_dsn(database_url)
        self.name = name
        self.key = lock_key(name)
        self.on_change = on_change
        self.connect_timeout_s = connect_timeout_s
        self._conn: psycopg.Connection | None = None
        self._leader = False

    @property
    def is_leader(self) -> bool:
        return self._leader

    @property
    def backend_pid(self) -> int | None:
        return self._conn.info.backend_pid if self._conn is not None else None

    def _set(self, leader: bool) -> None:
        if leader != self._leader:
            self._leader = leader
            log.info("%s: %s leadership", self.name, "gained" if leader else "lost")
            if self.on_change is not None:
                self.on_change(leader)

    def _drop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # already broken
                log.debug("closing a broken leader connection", exc_info=True)
        self._conn = None
        self._set(False)

    def _connect(self) -> psycopg.Connection:
        # TCP keepalives so a silent network cut is noticed, and the server
        # drops the session (and the lock) when the leader host vanishes.
        return psycopg.connect(
            self.dsn,
            autocommit=True,
            connect_timeout=self.connect_timeout_s,
            keepalives=1,
            keepalives_idle=10,
            keepalives_interval=5,
            keepalives_count=3,
            application_name=f"gpuq-leader:{self.name}"[:63],
        )

    def ensure(self) -> bool:
        """Am I the leader now? Verifies a held lock, else tries to take it."""
        try:
            if self._conn is None or self._conn.closed:
                self._conn = self._connect()
            if self._leader:
                # Still the same live session holding our lock?
                row = self._conn.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                    "AND pid = pg_backend_pid() AND objid = (%s::bigint & 4294967295)::oid "
                    "AND classid = ((%s::bigint >> 32) & 4294967295)::oid AND objsubid = 1",
                    (self.key, self.key),
                ).fetchone()
                if row and row[0] > 0:
                    return True
                self._set(False)
            row = self._conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()
            self._set(bool(row and row[0]))
        except psycopg.Error as e:
            log.warning("%s: leader connection failed (%s); not leading", self.name, e)
            self._drop()
        return self._leader

    def release(self) -> None:
        """Step down (shutdown): unlock and close so a standby takes over at once."""
        if self._conn is not None and not self._conn.closed and self._leader:
            with contextlib.suppress(psycopg.Error):
                self._conn.execute("SELECT pg_advisory_unlock(%s)", (self.key,))
        self._drop()

    def __enter__(self) -> LeaderElector:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def fence(connection: Any, name: str = "gpuq-dispatcher") -> bool:
    """Take the transaction-level critical-section lock in the caller's
    transaction (a SQLAlchemy Connection/Session or a psycopg connection);
    False means another dispatcher is committing a cycle right now."""
    key = lock_key(name + ":cycle")
    if hasattr(connection, "exec_driver_sql"):
        row = connection.exec_driver_sql(f"SELECT pg_try_advisory_xact_lock({key})").fetchone()
    elif hasattr(connection, "execute") and hasattr(connection, "get_bind"):  # ORM Session

        row = connection.execute(text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": key}).first()
    else:
        row = connection.execute("SELECT pg_try_advisory_xact_lock(%s)", (key,)).fetchone()
    return bool(row and row[0])
