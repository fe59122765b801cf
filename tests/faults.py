"""Fault injection against the real PostgreSQL, shared by the reliability tests.

* :func:`kill_connection_on` terminates (``pg_terminate_backend``, from a
  separate admin connection) the very backend that is about to run a
  statement matching a pattern: a connection killed mid-pass, exactly where
  the test wants it.
* :func:`kill_backends` terminates every backend of a database whose
  ``application_name`` matches, as an operator or a failover would.
* :class:`TcpProxy` forwards a local port to the database server; ``cut()``
  refuses new connections and resets the open ones, ``restore()`` listens
  again. A database outage for one test, without stopping the shared server.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable, Iterator

import psycopg
from sqlalchemy import Engine, event
from sqlalchemy.engine import make_url

from app.store.db import normalize_url


def admin_conninfo(url: str) -> str:
    u = make_url(normalize_url(url)).set(drivername="postgresql")
    return u.render_as_string(hide_password=False)


@contextlib.contextmanager
def kill_connection_on(
    engine: Engine, pattern: str | Callable[[str], bool], *, times: int = 1, skip: int = 0
) -> Iterator[list[str]]:
    """Kill the backend about to run a statement matching ``pattern`` (a substring
    or a predicate), after letting ``skip`` matching statements through, at most
    ``times`` times while the block runs. Yields the statements that were hit."""
    hits: list[str] = []
    seen = [0]
    admin = admin_conninfo(engine.url.render_as_string(hide_password=False))
    matches = pattern if callable(pattern) else (lambda sql: pattern in sql)

    def before(conn, cursor, statement, parameters, context, executemany):  # noqa: ANN001
        if len(hits) >= times or not matches(statement):
            return
        seen[0] += 1
        if seen[0] <= skip:
            return
        hits.append(statement)
        pid = cursor.connection.info.backend_pid
        with psycopg.connect(admin, autocommit=True) as killer:
            killer.execute("SELECT pg_terminate_backend(%s)", (pid,))

    event.listen(engine, "before_cursor_execute", before)
    try:
        yield hits
    finally:
        event.remove(engine, "before_cursor_execute", before)


class Crash(BaseException):
    """The process "dies" here (a BaseException: no handler of the code under
    test catches it, as none survives a SIGKILL)."""


@contextlib.contextmanager
def crash_on(engine: Engine, *, skip: int = 0) -> Iterator[list[str]]:
    """Raise :class:`Crash` just before the (``skip`` + 1)-th statement the engine
    runs inside the block: a process killed at that point of its work. The
    caller then disposes the engine (the dead process's connections close)."""
    hits: list[str] = []
    seen = [0]

    def before(conn, cursor, statement, parameters, context, executemany):  # noqa: ANN001
        if hits:
            return
        seen[0] += 1
        if seen[0] > skip:
            hits.append(statement)
            raise Crash(statement[:60])

    event.listen(engine, "before_cursor_execute", before)
    try:
        yield hits
    finally:
        event.remove(engine, "before_cursor_execute", before)


def kill_backends(url: str, *, except_pid: int | None = None) -> int:
    """Terminate every other backend connected to ``url``'s database; returns how many."""
    dbname = make_url(normalize_url(url)).database
    with psycopg.connect(admin_conninfo(url), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid() AND pid <> %s",
            (dbname, except_pid or 0),
        ).fetchall()
    return sum(1 for (ok,) in rows if ok)


_RESET_ON_CLOSE = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends a RST


class TcpProxy:
    """A TCP forwarder from 127.0.0.1:<port> to ``target`` that a test can cut."""

    def __init__(self, target_host: str, target_port: int, unix_socket: str | None = None) -> None:
        self.target = (target_host, target_port)
        self.unix_socket = unix_socket
        self._lock = threading.Lock()
        self._socks: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self.port = 0
        self._listen()

    def _listen(self) -> None:
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(128)
        self.port = ls.getsockname()[1]
        self._listener = ls
        threading.Thread(target=self._accept, args=(ls,), daemon=True).start()

    def _accept(self, ls: socket.socket) -> None:
        while True:
            try:
                client, _ = ls.accept()
            except OSError:
                return  # cut
            try:
                upstream = self._connect_upstream()
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._socks.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            with self._lock:
                self._socks.discard(src)
                self._socks.discard(dst)

    @classmethod
    def in_front_of(cls, url: str) -> TcpProxy:
        """A proxy to the server of ``url``: TCP host and port, or the Unix socket the
        embedded server of ``make test`` listens on (``?host=/dir&port=N``), so the
        outage tests run on either."""
        u = make_url(normalize_url(url))
        socket_dir = u.query.get("host")
        if isinstance(socket_dir, str) and socket_dir.startswith("/"):
            port = u.port or int(u.query.get("port", 5432))
            return cls("", port, unix_socket=f"{socket_dir}/.s.PGSQL.{port}")
        return cls(u.host or "127.0.0.1", u.port or 5432)

    def _connect_upstream(self) -> socket.socket:
        if self.unix_socket is None:
            return socket.create_connection(self.target, timeout=5)
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        upstream.settimeout(5)
        try:
            upstream.connect(self.unix_socket)
        except OSError:
            upstream.close()
            raise
        return upstream

    def url_for(self, url: str) -> str:
        """``url`` pointed at the proxy (over TCP, whatever the server listens on)."""
        u = make_url(normalize_url(url))
        u = u.difference_update_query(["host", "port"]).set(host="127.0.0.1", port=self.port)
        return u.render_as_string(hide_password=False)

    def cut(self) -> None:
        """The database is gone: new connections are refused, open ones reset."""
        if self._listener is not None:
            # shutdown() first: close() alone does not wake the thread in accept()
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None
        with self._lock:
            socks = list(self._socks)
            self._socks.clear()
        for s in socks:
            with contextlib.suppress(OSError):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET_ON_CLOSE)
            # shutdown() wakes the pump blocked in recv() on it: close() alone leaves that
            # call holding the socket open (no RST: the client waits on it forever) while
            # its number is free for the next socket the process opens (the pump then
            # reads and writes someone else's connection)
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def restore(self) -> None:
        if self._listener is None:
            self._listen()

    def close(self) -> None:
        self.cut()
