"""Schema migrations: upgrade to head, and decide whether this code can run on a database.

Alembic is configured in code (script location inside the package), so
``gpuq db upgrade`` needs no ini file and works from an installed wheel.

Upgrades without an outage (docs/upgrading.md): migrations are
expand-then-contract, and each declares ``min_code_revision``, the oldest code
revision that still runs on the schema it leaves. Every applied migration
records its revision and that bound in the ``settings`` row ``schema_compat``
(same transaction as the version bump). Code that finds the database at a
revision it does not know (a newer release migrated it) reads that row: it is
compatible when the bound is a revision it has, so the pods of the previous
release stay ready while the new ones roll out, and after a rollback of the code.
The row lives in a table every release has had since 0001, so no release ever
needs a schema change to read it; a contract migration must never drop it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext, MigrationInfo
from alembic.script import ScriptDirectory
from alembic.script.revision import Revision
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
COMPAT_KEY = "schema_compat"  # settings row: {"revision": ..., "min_code_revision": ...}
UPGRADE_HINT = "Run `gpuq db upgrade` (with the same DATABASE_URL) and start again."

log = logging.getLogger(__name__)


class SchemaIncompatible(RuntimeError):
    """This code cannot run on the database's schema (older than the code, or a
    newer one that needs newer code); the message says which command fixes it."""


@dataclass(frozen=True)
class SchemaStatus:
    """What readiness and start-up decide from (``/readyz`` shows ``detail``)."""

    ready: bool
    database: str | None  # the database's revision (None: empty database)
    code: str  # the code's head revision
    detail: str
    min_code_revision: str | None = None  # from the compatibility record, when read


def alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("file_template", "%%(rev)s_%%(slug)s")
    return cfg


@cache
def code_revisions() -> tuple[str, ...]:
    """The code's revisions, oldest first, head last (cached: /readyz asks every few
    seconds and the scripts do not change while the process runs)."""
    script = ScriptDirectory.from_config(alembic_config())
    heads = script.get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"migrations must be linear, found heads {heads}")
    return tuple(reversed([r.revision for r in script.walk_revisions()]))


def current_revisions(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(MigrationContext.configure(conn).get_current_heads())


def judge(
    database: Sequence[str], code: Sequence[str], record: Mapping[str, Any] | None
) -> SchemaStatus:
    """The compatibility rule (pure; unit-tested on its own).

    ``database`` is the database's revision(s), ``code`` this code's revisions
    oldest first, ``record`` the ``schema_compat`` row (or None). Ready when the
    database is at the code's head, or at a revision the code does not know whose
    record names a ``min_code_revision`` the code has (the code is at or past
    it). Not ready when the database is empty or behind the code (the migration
    Job has not run), or newer and needs code this is not."""
    head = code[-1]
    if not database:
        return SchemaStatus(False, None, head, f"empty database (code: {head}). {UPGRADE_HINT}")
    if len(database) > 1:
        have = ", ".join(sorted(database))
        return SchemaStatus(False, have, head,
                            f"database has several migration heads ({have}); code: {head}")
    (db,) = database
    if db == head:
        return SchemaStatus(True, db, head, "schema current")
    if db in code:
        return SchemaStatus(False, db, head,
                            f"database schema {db} is older than this code needs ({head}). "
                            f"{UPGRADE_HINT}")
    if record is None or record.get("revision") != db:
        return SchemaStatus(False, db, head,
                            f"database schema {db} is unknown to this code ({head}) and has no "
                            "compatibility record: run the release that migrated it")
    need = record.get("min_code_revision")
    if isinstance(need, str) and need in code:
        return SchemaStatus(True, db, head,
                            f"database schema {db} is newer than this code ({head}) and "
                            f"compatible with it (needs code at {need} or later)", need)
    return SchemaStatus(False, db, head,
                        f"database schema {db} needs code at revision {need} or later; this "
                        f"code is at {head}: roll out the release that migrated it", need)


def read_record(conn: Connection) -> dict | None:
    """The ``schema_compat`` row, or None (no row, or no settings table at all)."""
    try:
        with conn.begin_nested():
            value = conn.execute(
                text("SELECT value FROM settings WHERE key = :k"), {"k": COMPAT_KEY}
            ).scalar()
    except DBAPIError:
        return None
    return value if isinstance(value, dict) else None


def schema_status(engine: Engine) -> SchemaStatus:
    """Judge this code against the database (one connection, two small reads)."""
    code = code_revisions()
    with engine.connect() as conn:
        database = tuple(MigrationContext.configure(conn).get_current_heads())
        unknown = len(database) == 1 and database[0] not in code
        record = read_record(conn) if unknown else None
        conn.rollback()
    return judge(database, code, record)


def check_compatible(engine: Engine) -> SchemaStatus:
    """Raise :class:`SchemaIncompatible` (with the fix) unless this code can run."""
    status = schema_status(engine)
    if not status.ready:
        raise SchemaIncompatible(status.detail)
    return status


def record_compat(
    ctx: MigrationContext, step: MigrationInfo, heads: Collection[Any], run_args: Mapping[str, Any]
) -> None:
    """``on_version_apply`` hook (migrations/env.py): after each migration step,
    in its transaction, record where the schema now is and the oldest code that
    runs on it (the destination script's ``min_code_revision``)."""
    # a Revision each (alembic also gives None or the string "base" for the empty schema)
    revs = [r for r in (step.destination_revisions or ()) if isinstance(r, Revision)]
    if len(revs) != 1:  # downgraded to base: the settings table is gone too
        return
    rev = revs[0]
    need = getattr(getattr(rev, "module", None), "min_code_revision", rev.revision)
    assert ctx.connection is not None
    ctx.connection.execute(
        text(
            "INSERT INTO settings (key, value) VALUES (:k, CAST(:v AS jsonb)) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()"
        ),
        {"k": COMPAT_KEY,
         "v": json.dumps({"revision": rev.revision, "min_code_revision": need})},
    )


def upgrade(engine: Engine, revision: str = "head", config: Config | None = None) -> None:
    """Apply migrations up to ``revision`` on the engine's database.

    A database already at a newer revision (a later release migrated it, and
    this is the older code, e.g. after a rollback) is left as it is when this
    code is compatible with it, and refused otherwise: Alembic cannot upgrade
    from a revision it does not know."""
    if config is None and revision == "head":
        status = schema_status(engine)
        if status.database is not None and status.database not in code_revisions():
            if not status.ready:
                raise SchemaIncompatible(status.detail)
            log.info("gpuq: %s; nothing to upgrade", status.detail)
            return
    cfg = config or alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
