"""Autovacuum: the embedded server runs with it on, and the job tables carry their settings."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import psycopg
from sqlalchemy import text

from app.store.embedded import ensure_autovacuum, start_embedded


def test_embedded_server_runs_with_autovacuum_on():
    tmp = Path(tempfile.mkdtemp(prefix="gpuq-autovacuum-"))
    emb = start_embedded(tmp, database="gpuq_av", delete_on_stop=True)
    try:
        admin = emb.admin_conninfo()
        with psycopg.connect(admin, autocommit=True) as conn:
            assert conn.execute("SHOW autovacuum").fetchone()[0] == "on"
            conn.execute("ALTER SYSTEM SET autovacuum = off")  # a data folder where it was off
            conn.execute("SELECT pg_reload_conf()")
        with psycopg.connect(admin, autocommit=True) as conn:
            assert conn.execute("SHOW autovacuum").fetchone()[0] == "off"
        ensure_autovacuum(admin)
        with psycopg.connect(admin, autocommit=True) as conn:
            assert conn.execute("SHOW autovacuum").fetchone()[0] == "on"
    finally:
        emb.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def test_job_tables_carry_their_autovacuum_settings(engine):
    with engine.connect() as c:
        opts = dict(
            c.execute(
                text(
                    "SELECT relname, reloptions FROM pg_class WHERE relname IN "
                    "('jobs', 'job_events', 'allocations', 'queue_order')"
                )
            ).all()
        )
    assert "autovacuum_vacuum_scale_factor=0.05" in opts["jobs"]
    assert "autovacuum_vacuum_insert_scale_factor=0.05" in opts["job_events"]
    assert "autovacuum_vacuum_scale_factor=0.05" in opts["allocations"]
    assert "autovacuum_vacuum_threshold=50" in opts["queue_order"]
