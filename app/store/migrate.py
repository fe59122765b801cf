"""Schema migrations: upgrade to head, and check that a database is current.

Alembic is configured in code (script location inside the package), so
``gpuq db upgrade`` needs no ini file and works from an installed wheel.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


class SchemaNotCurrent(RuntimeError):
    """The database is behind (or ahead of) the code's migrations."""


def alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("file_template", "%%(rev)s_%%(slug)s")
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply migrations up to ``revision`` on the engine's database."""
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def head_revisions() -> set[str]:
    return set(ScriptDirectory.from_config(alembic_config()).get_heads())


def current_revisions(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(MigrationContext.configure(conn).get_current_heads())


def check_current(engine: Engine) -> None:
    """Raise :class:`SchemaNotCurrent` with the command that fixes it."""
    current, heads = current_revisions(engine), head_revisions()
    if current != heads:
        have = ", ".join(sorted(current)) or "empty database"
        want = ", ".join(sorted(heads))
        raise SchemaNotCurrent(
            f"database schema is not current (database: {have}; code: {want}). "
            "Run `gpuq db upgrade` (with the same DATABASE_URL) and start again."
        )
