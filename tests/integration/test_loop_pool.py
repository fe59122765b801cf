"""The loops' own connection pool (``GPUQ_LOOP_DB_POOL_SIZE``): in ``gpuq serve`` the
dispatcher used to share the API's pool, so 200 API clients made passes and the lease
reaper fail with pool timeouts. With its own pool a pass runs while every API
connection is taken."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import TimeoutError as PoolTimeout

from app.runtime import open_services
from app.settings import Settings


def _serve_settings(database_url: str, tmp_path, loop_pool: int) -> Settings:
    return Settings(DATABASE_URL=database_url, GPUQ_DATA_DIR=tmp_path,
                    GPUQ_ADMIN_TOKEN="loop-pool-admin-token-0123456789abcdef",
                    GPUQ_DB_POOL_SIZE=1, GPUQ_DB_MAX_OVERFLOW=0,
                    GPUQ_DB_POOL_TIMEOUT=0.5, GPUQ_LOOP_DB_POOL_SIZE=loop_pool)


def test_a_pass_runs_while_the_api_holds_every_connection(database_url, tmp_path):
    svc = open_services(_serve_settings(database_url, tmp_path, 2), with_loops=True)
    try:
        dispatcher = svc.loops[0]
        assert dispatcher.engine is svc.loop_engine and svc.loop_engine is not svc.engine
        with svc.engine.connect() as held:  # the API's one connection, busy
            held.execute(text("select 1"))
            with pytest.raises(PoolTimeout):
                svc.engine.connect()  # an API request now waits, then gets its 503
            dispatcher.run_once()  # the pass is not among them
            dispatcher.run_once()
    finally:
        svc.close()


def test_shared_pool_when_zero(database_url, tmp_path):
    """``GPUQ_LOOP_DB_POOL_SIZE=0`` keeps one pool: then the pass waits like a request."""
    svc = open_services(_serve_settings(database_url, tmp_path, 0), with_loops=True)
    try:
        dispatcher = svc.loops[0]
        assert svc.loop_engine is None and dispatcher.engine is svc.engine
        with svc.engine.connect() as held:
            held.execute(text("select 1"))
            with pytest.raises(PoolTimeout):
                dispatcher.run_once()
    finally:
        svc.close()
