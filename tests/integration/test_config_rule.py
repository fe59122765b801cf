"""One source of admin truth: objects of the config file are managed by it (API
writes get 409 naming the file); objects made through the API are left alone;
``serve`` applies GPUQ_CONFIG only when its content changed; ``gpuq config
apply`` shows and applies the diff. Checked across restarts (open_services
twice on one database), never by mocking."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from app.main import create_app
from app.runtime import open_services
from app.server import config_apply
from app.settings import Settings
from app.store.orm import AuditRow, TeamRow

ADMIN = "config-rule-admin-token-0123456789abcdef"
H = {"Authorization": f"Bearer {ADMIN}"}

CONFIG = """
gpu_types:
  - {name: a100-80g, memory_gb: 80, weight: 10}
pools:
  - {name: training, gpu_types: [a100-80g], guaranteed: {a100-80g: 100}}
teams:
  - {name: nlp, pool: training, quota_units: 400}
"""


def start(database_url: str, path: Path):
    settings = Settings(DATABASE_URL=database_url, GPUQ_CONFIG=path, GPUQ_ADMIN_TOKEN=ADMIN,
                        GPUQ_RUN_LOOPS=False, GPUQ_DATA_DIR=path.parent)
    svc = open_services(settings, with_loops=False)
    return svc, TestClient(create_app(services=svc))


def team(svc, name: str) -> TeamRow | None:
    with svc.session_factory() as s:
        return s.get(TeamRow, name)


def audit_count(svc) -> int:
    with svc.session_factory() as s:
        return s.query(AuditRow).count()


def test_config_and_api_never_undo_each_other(database_url, tmp_path):
    path = tmp_path / "gpuq.yaml"
    path.write_text(CONFIG)
    svc, c = start(database_url, path)
    try:
        with c:
            assert team(svc, "nlp").managed_by == str(path)
            r = c.put("/v1/teams/nlp/quota", json={"quota_units": 999, "quota_by_type": {}},
                      headers=H)
            assert r.status_code == 409 and str(path) in r.json()["detail"]
            assert c.delete("/v1/teams/nlp", headers=H).status_code == 409
            assert c.patch("/v1/pools/training", json={"weight": 3},
                           headers=H).status_code == 409
            # objects made through the API are the API's
            r = c.post("/v1/teams", json={"name": "vision", "pool": "training"}, headers=H)
            assert r.status_code == 201
            r = c.put("/v1/teams/vision/quota", json={"quota_units": 50, "quota_by_type": {}},
                      headers=H)
            assert r.status_code == 200
    finally:
        svc.close()

    # restart with the same file: not applied again, the API's change survives
    svc, c = start(database_url, path)
    try:
        before = audit_count(svc)
        assert team(svc, "vision").quota_units == 50 and team(svc, "vision").managed_by is None
        assert team(svc, "nlp").quota_units == 400
    finally:
        svc.close()

    # the file changes: nlp's quota moves, vision is taken over by the file
    path.write_text(CONFIG.replace("quota_units: 400", "quota_units: 500")
                    + "  - {name: vision, pool: training, quota_units: 60}\n")
    svc, c = start(database_url, path)
    try:
        assert team(svc, "nlp").quota_units == 500
        assert team(svc, "vision").quota_units == 60
        assert team(svc, "vision").managed_by == str(path)
        assert audit_count(svc) == before + 2
        with svc.session_factory() as s:
            rows = s.query(AuditRow).order_by(AuditRow.id.desc()).limit(2).all()
        assert {(r.action, r.name, r.actor) for r in rows} == {
            ("update", "nlp", f"config:{path}"), ("adopt", "vision", f"config:{path}")}
    finally:
        svc.close()

    # vision leaves the file: released to the API, left as it is
    path.write_text(CONFIG)
    svc, c = start(database_url, path)
    try:
        with c:
            assert team(svc, "vision").managed_by is None
            assert team(svc, "vision").quota_units == 60
            r = c.put("/v1/teams/vision/quota", json={"quota_units": 70, "quota_by_type": {}},
                      headers=H)
            assert r.status_code == 200
    finally:
        svc.close()


def test_config_apply_dry_run_and_apply(database_url, tmp_path):
    path = tmp_path / "gpuq.yaml"
    path.write_text(CONFIG)
    settings = Settings(DATABASE_URL=database_url, GPUQ_ADMIN_TOKEN=ADMIN)
    lines = config_apply(settings, str(path), dry_run=True)
    assert "+ team nlp" in lines and "+ pool training" in lines
    assert config_apply(settings, str(path), dry_run=True) == lines  # nothing was written
    assert config_apply(settings, str(path), dry_run=False) == lines
    path.write_text(CONFIG.replace("quota_units: 400", "quota_units: 450"))
    lines = config_apply(settings, str(path), dry_run=True)
    assert "~ team nlp: quota_units 400.0 -> 450.0" in lines
    assert "= pool training" in lines
    assert config_apply(settings, str(path), dry_run=False) == lines
    # serve with the file just applied does not apply it again
    svc, _c = start(database_url, path)
    try:
        before = audit_count(svc)
        assert team(svc, "nlp").quota_units == 450
    finally:
        svc.close()
    svc, _c = start(database_url, path)
    try:
        assert audit_count(svc) == before
    finally:
        svc.close()
