"""/docs and /redoc load only files gpuq ships (no CDN): the HTML names local assets only,
and the vendored files are present, intact and package data."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings

VENDOR = Path(__file__).resolve().parents[2] / "app" / "ui" / "static" / "vendor"


def test_vendored_assets_match_their_checksums():
    lines = (VENDOR / "SHA256SUMS").read_text().splitlines()
    assert len(lines) >= 6
    for line in lines:
        digest, name = line.split(maxsplit=1)
        assert hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() == digest, name


def test_docs_pages_reference_only_local_assets():
    client = TestClient(create_app(Settings(GPUQ_RUN_LOOPS=False)))  # no lifespan: no database
    for path in ("/docs", "/redoc"):
        html = client.get(path).text
        urls = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']|url\(['"]?([^)'"]+)""", html)
        urls = [u for pair in urls for u in pair if u]
        assert urls, path
        assert all(u.startswith("/") for u in urls), (path, urls)
        assert "cdn" not in html.lower() and "fonts.googleapis" not in html
        for u in urls:
            if u.startswith("/ui/static/vendor/"):
                r = client.get(u)
                assert r.status_code == 200 and len(r.content) > 100, u
    assert '"validatorUrl": null' in client.get("/docs").text
