"""A PostgreSQL database of a test's own (created, migrated, configured, dropped)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg

from app.dispatch.leader import libpq_dsn
from app.domain.config import load_config_text
from app.store import migrate
from app.store.config_loader import apply_config, ensure_priority_classes
from app.store.db import make_engine, make_session_factory


def fresh_database(base_url: str, config_yaml: str) -> Iterator[str]:
    name = f"gpuq_k8s_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(libpq_dsn(base_url), autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    url = f"{base_url.rpartition('/')[0]}/{name}"
    try:
        engine = make_engine(url, null_pool=True)
        migrate.upgrade(engine)
        with make_session_factory(engine)() as s:
            ensure_priority_classes(s)
            apply_config(s, load_config_text(config_yaml))
            s.commit()
        engine.dispose()
        yield url
    finally:
        with psycopg.connect(libpq_dsn(base_url), autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
