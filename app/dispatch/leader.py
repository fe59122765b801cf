"""Leader election for dispatcher replicas with a PostgreSQL advisory lock, fenced.

Any number of dispatchers may run; only the holder of a session-level
advisory lock dispatches. The lock lives on a dedicated connection, so it
is released by PostgreSQL itself when the leader's session ends. Two things make
that safe:

* **The server notices a dead leader host.** Client-side keepalives only make the
  leader notice; a host that vanished without a FIN keeps its session (and the lock)
  on the server for ``tcp_keepalives_idle`` (7200 s by default) plus the probes, about
  2 h 11 min. The elector's session sets the server's keepalives and
  ``tcp_user_timeout`` itself (:data:`SESSION_OPTIONS`), so PostgreSQL drops a dead
  leader's session within about 25 s and a standby takes the lock.
* **A leader cut off behind something that still answers TCP stops, and loses the lock.**
  Between the leader and PostgreSQL there may be a proxy (pgbouncer, a cloud SQL proxy)
  or a path that accepts bytes and delivers nothing: TCP acknowledges every segment, so
  neither side's keepalives or ``tcp_user_timeout`` ever fire. Two bounds cover it: every
  query of the elector must complete within ``check_timeout_s`` (the client cuts its
  own socket otherwise, and stops leading: it cannot confirm the lock), and the session
  sets ``idle_session_timeout`` to ``lease_s``, so PostgreSQL ends a session that sent it
  nothing that long and frees the lock. ``check_timeout_s`` < ``lease_s``: the old
  leader has stopped acting before a standby can lead. The leader's passes query the
  session every pass (:meth:`LeaderElector.ensure`, and before every bind and stop).
* **A deposed leader cannot act.** Each gain of leadership increments a leader epoch
  (a fencing token) in the ``settings`` row ``leader:<name>``. The pass's write
  transactions check it (:meth:`LeaderElector.fence`, holding the row ``FOR SHARE``,
  so a new leader's increment waits for them and then sees their writes), and the
  cluster calls of a committed plan re-check the lock and the epoch before every
  bind and stop (:meth:`LeaderElector.still_leader`). The epoch is stamped on every
  Pod. What remains between a check and the call is closed by the apiserver: a bind's
  Pod names derive from the admission (app/cluster/kubernetes.py), so a deposed and
  a new leader binding the same admission collide on the names (409) instead of
  making two Pod sets.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

import psycopg
from sqlalchemy import text

from app.store.db import normalize_url, psycopg_conninfo

log = logging.getLogger(__name__)

#: the elector session's server-side TCP settings (PostgreSQL GUCs any user may set):
#: probe after 10 s idle, every 5 s, give up after 3; unacknowledged data for 25 s ends
#: the session (tcp_user_timeout, Linux). A dead leader's lock goes within ~25 s.
#: ``idle_session_timeout`` (PostgreSQL >= 14, ms): a session that sent nothing for the
#: lease (:data:`LEASE_S`) is ended, whatever TCP says.
LEASE_S = 60.0
CHECK_TIMEOUT_S = 10.0
SESSION_OPTIONS = {
    "tcp_keepalives_idle": "10",
    "tcp_keepalives_interval": "5",
    "tcp_keepalives_count": "3",
    "tcp_user_timeout": "25000",
    "idle_session_timeout": str(int(LEASE_S * 1000)),
}


def session_options(keepalive_idle_s: int = 10, keepalive_interval_s: int = 5,
                    keepalive_count: int = 3, user_timeout_s: float = 25.0,
                    lease_s: float = LEASE_S) -> dict[str, str]:
    """The elector session's settings (the defaults are :data:`SESSION_OPTIONS`)."""
    return {
        "tcp_keepalives_idle": str(keepalive_idle_s),
        "tcp_keepalives_interval": str(keepalive_interval_s),
        "tcp_keepalives_count": str(keepalive_count),
        "tcp_user_timeout": str(int(user_timeout_s * 1000)),
        "idle_session_timeout": str(int(lease_s * 1000)),
    }


def _cut(conn: psycopg.Connection) -> None:
    """End the client's side of a connection whose query got no answer in time: the
    waiting call then fails at once (the server, or a proxy that swallows bytes, may
    never answer)."""
    with contextlib.suppress(OSError, ValueError):
        sock = socket.socket(fileno=os.dup(conn.fileno()))
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.close()
#: the settings row holding the leader epoch of an elector name
EPOCH_KEY = "leader:{name}"


class NotLeader(RuntimeError):
    """This process lost leadership (its epoch is not the current one)."""


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
        options: dict[str, str] | None = None,
        check_timeout_s: float = CHECK_TIMEOUT_S,
    ) -> None:
        # the session's TCP settings and lease (session_options); every query of the
        # elector must answer within check_timeout_s, which must be under the lease
        self.options = dict(options or SESSION_OPTIONS)
        self.check_timeout_s = check_timeout_s
        lease = int(self.options.get("idle_session_timeout", "0")) / 1000
        if lease and check_timeout_s >= lease:
            raise ValueError(f"check_timeout_s {check_timeout_s} must be under the lease "
                             f"{lease} (idle_session_timeout)")
        self.dsn = libpq_dsn(database_url)
        self.name = name
        self.key = lock_key(name)
        self.on_change = on_change
        self.connect_timeout_s = connect_timeout_s
        self._conn: psycopg.Connection | None = None
        self._leader = False
        # the fencing token of the current term (None: not leading, or no settings table)
        self.epoch: int | None = None
        self.epoch_key = EPOCH_KEY.format(name=name)[:63]

    @property
    def is_leader(self) -> bool:
        return self._leader

    @property
    def backend_pid(self) -> int | None:
        return self._conn.info.backend_pid if self._conn is not None else None

    def _set(self, leader: bool) -> None:
        if leader != self._leader:
            self._leader = leader
            self.epoch = self._next_epoch() if leader else None
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
        # TCP keepalives on both ends: the client notices a silent network cut, and
        # the server drops the session (and the lock) when the leader host vanishes
        o = self.options
        options = " ".join(f"-c {k}={v}" for k, v in o.items())
        return psycopg.connect(
            self.dsn,
            autocommit=True,
            connect_timeout=self.connect_timeout_s,
            keepalives=1,
            keepalives_idle=int(o["tcp_keepalives_idle"]),
            keepalives_interval=int(o["tcp_keepalives_interval"]),
            keepalives_count=int(o["tcp_keepalives_count"]),
            tcp_user_timeout=int(o["tcp_user_timeout"]),
            options=options,
            application_name=f"gpuq-leader:{self.name}"[:63],
        )

    def _query(self, q: str, params: tuple = ()) -> Any:
        """One row of ``q`` on the elector's session, answered within
        ``check_timeout_s`` or a :class:`psycopg.OperationalError`."""
        conn = self._conn
        assert conn is not None
        timer = threading.Timer(self.check_timeout_s, _cut, args=(conn,))
        timer.daemon = True
        timer.start()
        try:
            return conn.execute(q, params).fetchone()
        finally:
            timer.cancel()

    def _next_epoch(self) -> int | None:
        """A new term: increment the leader epoch (on the lock's own session, so it
        is written only while the lock is held). None when the database has no
        settings table (an unmigrated one in tests): not fenced then."""
        assert self._conn is not None
        try:
            row = self._conn.execute(
                "INSERT INTO settings (key, value, updated_at) "
                "VALUES (%s, jsonb_build_object('epoch', 1, 'pid', pg_backend_pid()), now()) "
                "ON CONFLICT (key) DO UPDATE SET value = jsonb_build_object('epoch', "
                "COALESCE((settings.value->>'epoch')::bigint, 0) + 1, 'pid', pg_backend_pid()),"
                " updated_at = now() RETURNING (value->>'epoch')::bigint",
                (self.epoch_key,),
            ).fetchone()
        except psycopg.errors.UndefinedTable:
            log.warning("%s: no settings table; leader epoch not kept (not fenced)", self.name)
            return None
        epoch = int(row[0]) if row else None
        log.info("%s: leader epoch %s", self.name, epoch)
        return epoch

    def current_epoch(self, connection: Any) -> int | None:
        """The epoch in the database, read in the caller's transaction and held FOR
        SHARE until it ends (a new leader's increment waits for it)."""
        q = "SELECT (value->>'epoch')::bigint FROM settings WHERE key = %s FOR SHARE"
        if hasattr(connection, "exec_driver_sql"):  # SQLAlchemy Connection
            row = connection.exec_driver_sql(q, (self.epoch_key,)).fetchone()
        elif hasattr(connection, "get_bind"):  # ORM Session
            row = connection.execute(text(q.replace("%s", ":k")), {"k": self.epoch_key}).first()
        else:
            row = connection.execute(q, (self.epoch_key,)).fetchone()
        return int(row[0]) if row and row[0] is not None else None

    def _current_epoch_bounded(self) -> int | None:
        row = self._query("SELECT (value->>'epoch')::bigint FROM settings WHERE key = %s",
                          (self.epoch_key,))
        return int(row[0]) if row and row[0] is not None else None

    def fence(self, connection: Any) -> None:
        """Raise :class:`NotLeader` unless this term's epoch is still the current one;
        call inside a write transaction before it commits."""
        if self.epoch is None:
            if self._leader:
                return  # no settings table: not fenced (logged when the term began)
            raise NotLeader(f"{self.name}: not the leader")
        current = self.current_epoch(connection)
        if current != self.epoch:
            raise NotLeader(f"{self.name}: leader epoch {self.epoch} is over "
                            f"(the database is at {current})")

    def still_leader(self) -> bool:
        """Re-check before acting on the cluster: the lock still held by this session
        and the epoch still ours. Never takes the lock (use :meth:`ensure`)."""
        if not self._leader or self._conn is None or self._conn.closed:
            return False
        try:
            row = self._query(_HOLDS_LOCK, (self.key, self.key))
            if not (row and row[0] > 0):
                self._set(False)
                return False
            if self.epoch is not None and self._current_epoch_bounded() != self.epoch:
                self._set(False)
                return False
        except psycopg.Error as e:
            log.warning("%s: leader connection failed (%s); not leading", self.name, e)
            self._drop()
            return False
        return True

    def ensure(self) -> bool:
        """Am I the leader now? Verifies a held lock, else tries to take it."""
        try:
            if self._conn is None or self._conn.closed:
                self._conn = self._connect()
            if self._leader:
                # Still the same live session holding our lock?
                row = self._query(_HOLDS_LOCK, (self.key, self.key))
                if row and row[0] > 0:
                    return True
                self._set(False)
            row = self._query("SELECT pg_try_advisory_lock(%s)", (self.key,))
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


_HOLDS_LOCK = (
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
    "AND pid = pg_backend_pid() AND objid = (%s::bigint & 4294967295)::oid "
    "AND classid = ((%s::bigint >> 32) & 4294967295)::oid AND objsubid = 1"
)


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
