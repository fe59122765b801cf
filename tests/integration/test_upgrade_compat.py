"""Upgrades without an outage: code runs on a NEWER schema that is compatible.

A fresh database is migrated to this code's head plus a synthetic next-release
expand migration (written to a temporary folder, applied through this code's
``env.py``, so it records its ``min_code_revision`` as a real one does). Then:

- the previous release's code, taken from git (``git archive``) and run as its own
  ``gpuq serve`` process, is ready, accepts a job and dispatches it on that schema
  (what the pods of the old ReplicaSet do while the new one rolls out);
- this code, in process: ready on the newer compatible schema, not ready (and
  refusing to start) once a contract step needs newer code, not ready on an older
  schema; ``gpuq db upgrade`` of the old code leaves a newer compatible schema alone.

"The previous release" is the parent of the commit that added the newest
migration, when that code already has the compatibility rule; before the first
such release, the committed code (``HEAD``) plays it against the next release's
expand step. The test prints which one it ran.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path

import httpx
import psycopg
import pytest
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from fastapi.testclient import TestClient
from psycopg import sql
from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from app.main import create_app
from app.runtime import open_services
from app.server import db_upgrade
from app.settings import Settings
from app.store import migrate
from app.store.db import make_engine, normalize_url, psycopg_conninfo
from tests.integration.conftest import job_body
from tests.live_server import free_port

ROOT = Path(__file__).resolve().parents[2]
VERSIONS = "app/migrations/versions"
TOKEN = "upgrade-test-admin-token-" + "x" * 16

NEXT = '''"""next release, expand: a nullable column and a new table (test only)"""
import sqlalchemy as sa
from alembic import op

revision = "9001"
down_revision = {down!r}
branch_labels = None
depends_on = None
min_code_revision = {need!r}


def upgrade() -> None:
    op.add_column("jobs", sa.Column("next_release_note", sa.Text(), nullable=True))
    op.create_table("next_release_things", sa.Column("id", sa.Integer(), primary_key=True))


def downgrade() -> None:
    op.drop_table("next_release_things")
    op.drop_column("jobs", "next_release_note")
'''

CONTRACT = '''"""a later release, contract: drops what code before 9001 may still use (test only)"""
import sqlalchemy as sa
from alembic import op

revision = "9002"
down_revision = "9001"
branch_labels = None
depends_on = None
min_code_revision = "9001"
contract = True


def upgrade() -> None:
    op.drop_column("jobs", "next_release_note")


def downgrade() -> None:
    op.add_column("jobs", sa.Column("next_release_note", sa.Text(), nullable=True))
'''


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                          check=True, timeout=60).stdout


def package_at(commit: str) -> str:
    """The top-level package's name at ``commit``: ``app``, or ``gpuq`` while it had that name."""
    done = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}:app/__init__.py"],
                          capture_output=True, timeout=60)
    return "app" if done.returncode == 0 else "gpuq"


def _migrations_at(commit: str) -> set[str]:
    names = git("ls-tree", "--name-only", f"{commit}:{VERSIONS}").split()
    return {n for n in names if n[:4].isdigit()}


def previous_release() -> tuple[str, str]:
    """(commit, why) of the code that plays the release being upgraded from."""
    here = {p.name for p in (ROOT / VERSIONS).glob("0*.py")}
    if _migrations_at("HEAD") != here:
        return "HEAD", "the committed code, whose migrations this working tree extends"
    newest = max(here)
    # -M: the package's renames are not the commit that added the migration
    added = git("log", "-1", "-M", "--diff-filter=A", "--format=%H", "--",
                f"{VERSIONS}/{newest}", f"gpuq/migrations/versions/{newest}")
    parent = f"{added.strip()}^"
    if added.strip() and "min_code_revision" in git(
            "show", f"{parent}:{package_at(parent)}/store/migrate.py"):
        return parent, f"the release before migration {newest[:4]} (parent of {added[:10]})"
    return "HEAD", (f"the release before {newest[:4]} predates the compatibility rule, so "
                    "the committed code plays the release being upgraded from")


@pytest.fixture(scope="module")
def fresh_url(database_url: str) -> Iterator[str]:
    base = make_url(normalize_url(database_url))
    name = f"{base.database}_upg_{secrets.token_hex(2)}"
    admin = psycopg_conninfo(base.set(database="postgres").render_as_string(hide_password=False))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield base.set(database=name).render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(scope="module")
def future(tmp_path_factory) -> Path:
    """The folder of the synthetic later migrations (9001 expand, 9002 contract)."""
    d = tmp_path_factory.mktemp("next_release")
    head = migrate.code_revisions()[-1]
    (d / "9001_next_expand.py").write_text(NEXT.format(down=head, need=head_min_code()))
    (d / "9002_later_contract.py").write_text(CONTRACT)
    return d


def head_min_code() -> str:
    """The oldest code this code's head schema serves: an expand-only next step (nullable
    column, new table) keeps it, so the previous release still runs on top of it."""
    head = migrate.code_revisions()[-1]
    rev = ScriptDirectory.from_config(migrate.alembic_config()).get_revision(head)
    return getattr(rev.module, "min_code_revision", head)


def future_config(future: Path) -> Config:
    """This code's migrations plus the synthetic later ones, through this env.py."""
    cfg = migrate.alembic_config()
    cfg.set_main_option("path_separator", "os")
    cfg.set_main_option("version_locations",
                        os.pathsep.join([str(migrate.MIGRATIONS_DIR / "versions"), str(future)]))
    return cfg


def upgrade_to(engine: Engine, future: Path, revision: str) -> None:
    migrate.upgrade(engine, revision, config=future_config(future))


def record(engine: Engine) -> dict | None:
    with engine.connect() as conn:
        return migrate.read_record(conn)


@pytest.fixture(scope="module")
def expanded(fresh_url: str, future: Path) -> Iterator[Engine]:
    """The fresh database at this code's head plus the next release's expand step."""
    eng = make_engine(fresh_url, null_pool=True)
    upgrade_to(eng, future, "9001")
    yield eng
    eng.dispose()


def settings_for(url: str, tmp_path: Path) -> Settings:
    return Settings(DATABASE_URL=url, GPUQ_DATA_DIR=tmp_path, GPUQ_ADMIN_TOKEN=TOKEN,
                    GPUQ_RUN_LOOPS=False)


def test_the_migration_records_its_compatibility(expanded: Engine) -> None:
    assert record(expanded) == {"revision": "9001", "min_code_revision": head_min_code()}
    assert migrate.current_revisions(expanded) == {"9001"}


def _wait_ready(base: str, proc: subprocess.Popen) -> httpx.Response:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"old gpuq serve exited: {proc.stdout.read()}")
        try:
            r = httpx.get(f"{base}/readyz", timeout=2)
            if r.status_code == 200:
                return r
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError("old code never became ready on the newer schema")


def test_previous_release_serves_and_dispatches_on_the_new_schema(
    expanded: Engine, fresh_url: str, tmp_path: Path
) -> None:
    commit, why = previous_release()
    print(f"old code: {commit} ({why})")
    old = tmp_path / "old"
    old.mkdir()
    pkg = package_at(commit)
    with tarfile.open(fileobj=BytesIO(subprocess.run(
            ["git", "-C", str(ROOT), "archive", commit, pkg], capture_output=True,
            check=True, timeout=120).stdout)) as tar:
        tar.extractall(old, filter="data")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(old), "DATABASE_URL": fresh_url,
           "GPUQ_DATA_DIR": str(tmp_path / "data"), "GPUQ_PORT": str(port),
           "GPUQ_ADMIN_TOKEN": TOKEN, "GPUQ_SIM_SPEED": "20"}
    proc = subprocess.Popen(
        [sys.executable, "-c", f"import sys, {pkg}; print({pkg}.__file__, flush=True); "
         f"from {pkg}.cli import main; sys.argv = ['gpuq', 'serve']; main()"],
        cwd=old, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        assert proc.stdout.readline().strip() == str(old / pkg / "__init__.py")
        ready = _wait_ready(base, proc)
        assert "9001" in ready.text  # it knows it runs on a newer schema
        auth = {"Authorization": f"Bearer {TOKEN}"}
        body = job_body("after-upgrade", duration_estimate_s=30)
        r = httpx.post(f"{base}/v1/jobs", headers=auth, timeout=10, json=body)
        assert r.status_code == 201, r.text
        job = r.json()["id"]
        deadline = time.monotonic() + 120
        status = "pending"
        while status in ("pending", "admitted") and time.monotonic() < deadline:
            time.sleep(0.3)
            status = httpx.get(f"{base}/v1/jobs/{job}", headers=auth, timeout=10).json()["status"]
        assert status in ("running", "succeeded"), status  # the old dispatcher placed it
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    with expanded.connect() as conn:  # it wrote through the expanded table
        assert conn.exec_driver_sql(
            "SELECT count(*) FROM jobs WHERE name = 'after-upgrade' AND next_release_note IS NULL"
        ).scalar_one() == 1


def test_this_code_on_newer_schemas(expanded: Engine, fresh_url: str, future: Path,
                                    tmp_path: Path) -> None:
    settings = settings_for(fresh_url, tmp_path)
    with TestClient(create_app(settings)) as c:
        r = c.get("/readyz")
        assert r.status_code == 200 and "newer than this code" in r.json()["schema"]
        # the old code's `gpuq db upgrade` (a rollback's Job) leaves it as it is, and says so
        assert "9001 is newer than this code" in db_upgrade(settings)
        assert migrate.current_revisions(expanded) == {"9001"}

        upgrade_to(expanded, future, "9002")  # a later release's contract step
        r = c.get("/readyz")
        assert r.status_code == 503 and "needs code at revision 9001" in r.json()["detail"]
        with pytest.raises(migrate.SchemaIncompatible, match="9001"):
            open_services(settings, with_loops=False)  # and a restarted pod does not start
        with pytest.raises(SystemExit) as exit_:
            db_upgrade(settings)  # exits 2 with the reason on stderr, migrates nothing
        assert exit_.value.code == 2 and migrate.current_revisions(expanded) == {"9002"}

        # back down to this code's head: the record follows the downgrade
        head = migrate.code_revisions()[-1]
        cfg = future_config(future)
        with expanded.begin() as conn:
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, head)
        assert record(expanded)["revision"] == head
        assert c.get("/readyz").json() == {"status": "ready", "schema": "schema current"}

        # an older schema than the code: not ready until the migration Job runs
        previous = migrate.code_revisions()[-2]
        with expanded.begin() as conn:
            conn.exec_driver_sql("UPDATE alembic_version SET version_num = %(v)s",
                                 {"v": previous})
        try:
            r = c.get("/readyz")
            assert r.status_code == 503 and "gpuq db upgrade" in r.json()["detail"]
        finally:
            with expanded.begin() as conn:
                conn.exec_driver_sql("UPDATE alembic_version SET version_num = %(v)s",
                                     {"v": head})
