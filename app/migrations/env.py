"""Alembic environment: online migrations against the URL or connection given.

``app.store.migrate`` passes a live connection in ``config.attributes``;
the ``alembic`` CLI falls back to ``sqlalchemy.url`` or ``DATABASE_URL``.
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import create_engine

from app.store.db import normalize_url
from app.store.migrate import record_compat
from app.store.orm import Base

config = context.config
target_metadata = Base.metadata


def _run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        transaction_per_migration=True,
        # every step records its revision and the oldest code that runs on it
        # (the settings row read by /readyz: docs/upgrading.md)
        on_version_apply=record_compat,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url") or os.environ.get("DATABASE_URL")
    if not url:
        raise SystemExit("set DATABASE_URL (or sqlalchemy.url) to run migrations")
    engine = create_engine(normalize_url(url))
    with engine.connect() as conn:
        _run(conn)
        conn.commit()
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run `gpuq db upgrade`")
run_migrations_online()
