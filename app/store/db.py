"""Engine and session factory.

Nothing here runs at import: the server, the CLI and each test build their
own engine from a URL. Sessions do not expire on commit so a route can
render a row it just committed.
"""

from __future__ import annotations

from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool


def normalize_url(url: str) -> str:
    """Accept plain ``postgresql://`` / ``postgres://`` URLs and use psycopg 3."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def make_engine(url: str, *, null_pool: bool = False, pool_size: int = 10) -> Engine:
    # JIT compilation pays off for long analytic queries, not for gpuq's short ones:
    # with it on, a report query whose estimate crosses jit_above_cost spent 1.5-2 s
    # compiling before running for milliseconds
    kwargs: dict = {
        "pool_pre_ping": True,
        "future": True,
        "connect_args": {"options": "-c jit=off"},
    }
    if null_pool:
        kwargs["poolclass"] = NullPool
    else:
        kwargs["pool_size"] = pool_size
        kwargs["max_overflow"] = pool_size
    return create_engine(normalize_url(url), **kwargs)


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False, autoflush=True)


def psycopg_conninfo(url: str) -> str:
    """The libpq form of a SQLAlchemy URL (for a raw LISTEN connection)."""
    from sqlalchemy.engine import make_url

    u = make_url(normalize_url(url)).set(drivername="postgresql")
    return u.render_as_string(hide_password=False)
