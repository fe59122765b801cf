"""Token expiry input and the admin lock-out: a naive instant was a 500 (on
create and rotate), ``9999-12-31T23:59:59-23:59`` a 500 *after* commit that left a
token in year 10000 which broke ``GET /v1/tokens`` for good, and rotating the last
admin token with ``expires_in_s: 2`` locked every admin out with no way back."""

from __future__ import annotations

from sqlalchemy import func, select

from app.server import reset_admin_token
from app.settings import Settings
from app.store.orm import ApiTokenRow


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _count(session_factory) -> int:
    with session_factory() as s:
        return s.scalar(select(func.count()).select_from(ApiTokenRow))


BAD_INSTANTS = [
    ("2030-01-01T00:00:00", "time zone"),
    ("9999-12-31T23:59:59-23:59", "expires_at"),
    ("2200-01-01T00:00:00Z", "10 years"),
]


def test_bad_expiry_is_422_and_writes_nothing(client, admin, session_factory):
    tok = client.post("/v1/teams/nlp/tokens", headers=admin).json()
    before = _count(session_factory)
    for instant, says in BAD_INSTANTS:
        for path in ("/v1/teams/nlp/tokens", f"/v1/tokens/{tok['id']}/rotate"):
            r = client.post(path, json={"expires_at": instant}, headers=admin)
            assert r.status_code == 422, (path, instant, r.text)
            assert says in r.json()["detail"], r.text
    r = client.post("/v1/tokens", json={"scope": "team:nlp", "expires_at": BAD_INSTANTS[1][0]},
                    headers=admin)
    assert r.status_code == 422, r.text
    assert _count(session_factory) == before
    assert client.get("/v1/tokens", headers=admin).status_code == 200
    assert client.post(f"/v1/tokens/{tok['id']}/revoke", headers=admin).status_code == 200


def test_last_admin_token_cannot_get_an_expiry(client, admin):
    [adm] = [t for t in client.get("/v1/tokens", headers=admin).json() if t["scope"] == "admin"]
    r = client.post(f"/v1/tokens/{adm['id']}/rotate", json={"expires_in_s": 2}, headers=admin)
    assert r.status_code == 409 and "last admin token" in r.json()["detail"], r.text
    assert client.get("/v1/tokens", headers=admin).status_code == 200  # still works
    # with a second, lasting admin token the first may be given an expiry
    second = client.post("/v1/tokens", json={"scope": "admin", "name": "ops"}, headers=admin)
    assert second.status_code == 201
    r = client.post(f"/v1/tokens/{adm['id']}/rotate", json={"expires_in_s": 60}, headers=admin)
    assert r.status_code == 201, r.text


def test_break_glass_reset_admin(client, admin, database_url, tmp_path):
    """`gpuq tokens reset-admin` with database access: every admin token revoked, one
    new admin token that works at once."""
    settings = Settings(DATABASE_URL=database_url, GPUQ_DATA_DIR=tmp_path)
    token = reset_admin_token(settings)
    assert client.get("/v1/tokens", headers=admin).status_code == 401
    r = client.get("/v1/tokens", headers=bearer(token))
    assert r.status_code == 200
    admins = [t for t in r.json() if t["scope"] == "admin"]
    assert [t["state"] for t in admins].count("active") == 1
    r = client.get("/v1/audit?kind=token", headers=bearer(token))
    assert r.json()[0]["actor"] == "reset-admin"  # newest first


def test_reset_admin_replaces_the_kept_token_file(client, admin, database_url, tmp_path):
    """`make run` keeps the admin token in the data folder and the README reads it from
    there; after a reset it still held the revoked token."""
    kept = tmp_path / "admin_token"
    kept.write_text("gpuqa_revoked-soon\n")
    kept.chmod(0o600)
    token = reset_admin_token(Settings(DATABASE_URL=database_url, GPUQ_DATA_DIR=tmp_path))
    assert kept.read_text().strip() == token
    assert kept.stat().st_mode & 0o777 == 0o600
    assert client.get("/v1/tokens", headers=bearer(kept.read_text().strip())).status_code == 200
    # with GPUQ_ADMIN_TOKEN set gpuq keeps no file: nothing is written
    other = tmp_path / "elsewhere"
    reset_admin_token(Settings(DATABASE_URL=database_url, GPUQ_DATA_DIR=other,
                               GPUQ_ADMIN_TOKEN="x" * 40))
    assert not (other / "admin_token").exists()
