"""Engine and session factory.

Nothing here runs at import: the server, the CLI and each test build their
own engine from a URL. Sessions do not expire on commit so a route can
render a row it just committed.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Engine, create_engine, event, exc
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from app.store.deadline import BudgetedQueuePool, enforce_budgets


def normalize_url(url: str) -> str:
    """Accept plain ``postgresql://`` / ``postgres://`` URLs and use psycopg 3."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def make_engine(
    url: str,
    *,
    null_pool: bool = False,
    pool_size: int = 10,
    max_overflow: int | None = None,
    pool_timeout_s: float = 30.0,
    connect_timeout_s: int | None = None,
    statement_timeout_s: float | None = None,
) -> Engine:
    """An engine whose idle connections are checked before use (:func:`ping_when_idle`:
    after a database restart the first request reconnects instead of failing).

    ``pool_timeout_s`` bounds the wait for a pooled connection, ``connect_timeout_s``
    a new connection, ``statement_timeout_s`` every statement (server side); inside
    an API request both are cut to what is left of the request's budget
    (app/store/deadline.py). The API turns any of them running out into a 503 with
    Retry-After.
    """
    kwargs: dict = {"future": True}
    if null_pool:
        kwargs["poolclass"] = NullPool
    else:
        kwargs["poolclass"] = BudgetedQueuePool  # waits within the request's budget
        kwargs["pool_size"] = pool_size
        kwargs["max_overflow"] = pool_size if max_overflow is None else max_overflow
        kwargs["pool_timeout"] = pool_timeout_s
    # JIT compilation pays off for long analytic queries, not for gpuq's short ones:
    # with it on, a report query whose estimate crosses jit_above_cost spent 1.5-2 s
    # compiling before running for milliseconds
    options = ["-c jit=off"]
    if statement_timeout_s:
        options.append(f"-c statement_timeout={int(statement_timeout_s * 1000)}")
    connect_args: dict = {"options": " ".join(options)}
    if connect_timeout_s:
        connect_args["connect_timeout"] = connect_timeout_s
    kwargs["connect_args"] = connect_args
    engine = create_engine(normalize_url(url), **kwargs)
    ping_when_idle(engine)
    enforce_budgets(engine, statement_timeout_s)
    return engine


PING_IDLE_S = 1.0


def ping_when_idle(engine: Engine, idle_s: float = PING_IDLE_S) -> None:
    """Check a pooled connection before use when it sat unused for ``idle_s`` or more.

    ``pool_pre_ping`` pings on every checkout: a round trip per request, half of a
    submit's. A connection used less than a second ago is taken as alive; after a
    database restart the idle ones reconnect here (the ping fails, the pool opens a
    new one), and a busy one fails its one statement (the API answers 503 with
    Retry-After) while SQLAlchemy sees the disconnect and replaces every connection
    of the pool, so the next requests reconnect.
    """

    @event.listens_for(engine, "connect")
    def _connected(dbapi_conn: Any, record: Any) -> None:
        record.info["gpuq_used_at"] = time.monotonic()

    @event.listens_for(engine, "checkin")
    def _checked_in(dbapi_conn: Any, record: Any) -> None:
        record.info["gpuq_used_at"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_conn: Any, record: Any, proxy: Any) -> None:
        used = record.info.get("gpuq_used_at")
        if used is not None and time.monotonic() - used < idle_s:
            return
        try:
            alive = engine.dialect.do_ping(dbapi_conn)
        except Exception as e:  # the database went away: let the pool reconnect
            raise exc.DisconnectionError(str(e)) from e
        if not alive:
            raise exc.DisconnectionError("ping failed")


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False, autoflush=True)


def psycopg_conninfo(url: str) -> str:
    """The libpq form of a SQLAlchemy URL (for a raw LISTEN connection)."""
    u = make_url(normalize_url(url)).set(drivername="postgresql")
    return u.render_as_string(hide_password=False)
