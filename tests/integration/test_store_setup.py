"""Migrations, schema check at start, config loading, admin token, NOTIFY wake-up."""

from __future__ import annotations

import secrets
import threading

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import func, inspect, select
from sqlalchemy.engine import make_url

from app.dispatch.loops import LoopService
from app.dispatch.notify import NotifyListener
from app.domain.config import load_config_text
from app.runtime import UnsafeAdminToken, demo_config_text, open_services, resolve_admin_token
from app.settings import Settings
from app.store import migrate
from app.store.config_loader import apply_config
from app.store.db import make_engine, normalize_url, psycopg_conninfo
from app.store.node_rows import gpu_type_configs
from app.store.orm import ALL_TABLES, GpuTypeRow, NodeRow, PoolRow, TeamRow
from tests.integration.conftest import job_body


@pytest.fixture
def empty_database(database_url):
    """A second, unmigrated database on the same server."""
    base = make_url(normalize_url(database_url))
    name = f"{base.database}_empty_{secrets.token_hex(2)}"
    admin = psycopg_conninfo(base.set(database="postgres").render_as_string(hide_password=False))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield base.set(database=name).render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def test_migrations_create_every_table(engine):
    tables = set(inspect(engine).get_table_names())
    assert set(ALL_TABLES) <= tables
    migrate.check_compatible(engine)
    fks = {fk["name"] for fk in inspect(engine).get_foreign_keys("jobs")}
    assert "fk_jobs_team_teams" in fks  # the naming convention is in the schema


def test_serve_refuses_a_database_that_is_not_current(empty_database, tmp_path):
    settings = Settings(
        DATABASE_URL=empty_database, GPUQ_DATA_DIR=tmp_path, GPUQ_ADMIN_TOKEN="x" * 40
    )
    with pytest.raises(migrate.SchemaIncompatible, match="gpuq db upgrade"):
        open_services(settings, with_loops=False)
    # after the upgrade the same settings start, and load the demo config
    eng = make_engine(empty_database, null_pool=True)
    migrate.upgrade(eng)
    svc = open_services(settings, with_loops=True)
    try:
        with svc.session_factory() as s:
            assert s.scalar(select(func.count()).select_from(NodeRow)) == 8
        assert svc.cluster is not None and len(svc.cluster.list_nodes()) == 8
    finally:
        svc.close()
        eng.dispose()


def test_demo_config_loads_idempotently(session_factory):
    cfg = load_config_text(demo_config_text())
    with session_factory() as s:
        assert apply_config(s, cfg) > 0
        s.commit()
    with session_factory() as s:
        assert apply_config(s, cfg) == 0  # the same file again changes nothing
        s.commit()
    with session_factory() as s:
        nodes = {n.name: n for n in s.scalars(select(NodeRow))}
        a100 = [n for n in nodes.values() if n.gpu_type == "a100-80g"]
        assert len(a100) >= 2 and all(n.gpus == 8 and n.network == "ib" for n in a100)
        assert any(n.mig_layout for n in a100)
        assert sum(n.gpu_type == "v100-16g" for n in nodes.values()) == 2
        rtx = [n for n in nodes.values() if n.gpu_type == "rtx4090-24g"]
        assert len(rtx) == 3 and all(n.network == "eth" for n in rtx)
        assert {p.name for p in s.scalars(select(PoolRow))} == {"training", "inference", "mixed"}
        assert s.scalar(select(func.count()).select_from(TeamRow)) == 3
    # an edited file updates in place (upsert by name)
    edited = cfg.model_copy(deep=True)
    edited.gpu_types[1] = edited.gpu_types[1].model_copy(update={"weight": 5})
    with session_factory() as s:
        assert apply_config(s, edited) == 1
        s.commit()
        assert s.get(GpuTypeRow, "v100-16g").weight == 5


def test_gpu_types_read_back_as_configured(session_factory):
    """The GPU types the dispatcher and the Kubernetes backend read back from the table
    are the ones configured, every field included (speed was once dropped here)."""
    cfg = load_config_text(demo_config_text())
    cfg.gpu_types = [t.model_copy(update={"speed": 1.0 + i}) for i, t in enumerate(cfg.gpu_types)]
    with session_factory() as s:
        apply_config(s, cfg)
        s.commit()
    with session_factory() as s:
        assert gpu_type_configs(s) == sorted(cfg.gpu_types, key=lambda t: t.name)


def test_admin_token_generated_once_and_kept(tmp_path):
    shown: list[str] = []
    s = Settings(GPUQ_DATA_DIR=tmp_path)
    first = resolve_admin_token(s, announce=shown.append)
    second = resolve_admin_token(s, announce=shown.append)
    assert first == second and len(shown) == 1 and first in shown[0]
    assert (tmp_path / "admin_token").stat().st_mode & 0o077 == 0
    given = "given-" + "g" * 32
    assert resolve_admin_token(Settings(GPUQ_DATA_DIR=tmp_path, GPUQ_ADMIN_TOKEN=given)) == given


@pytest.mark.parametrize("bad", ["short", "change-me-admin-token", "Change-Me-Admin-Token"])
def test_unsafe_admin_token_is_refused(tmp_path, bad):
    with pytest.raises(UnsafeAdminToken):
        resolve_admin_token(Settings(GPUQ_DATA_DIR=tmp_path, GPUQ_ADMIN_TOKEN=bad))


class Counting(LoopService):
    name = "counting"

    def __init__(self) -> None:
        super().__init__(interval=3600)
        self.woken = threading.Event()

    def wake(self) -> None:
        self.woken.set()

    def run_once(self) -> None:
        pass


def test_submit_notifies_and_wakes_loops(client, admin, engine):
    loop = Counting()
    url = engine.url.render_as_string(hide_password=False)
    listener = NotifyListener(psycopg_conninfo(url), [loop])
    t = threading.Thread(target=listener.run, daemon=True)
    t.start()
    try:
        # the listener needs its LISTEN in place; submit until a wake-up arrives
        for i in range(20):
            assert client.post("/v1/jobs", json=job_body(f"n{i}"), headers=admin).status_code == 201
            if loop.woken.wait(0.5):
                break
        assert loop.woken.is_set() and listener.received >= 1
    finally:
        listener.stop()
        t.join(timeout=5)
