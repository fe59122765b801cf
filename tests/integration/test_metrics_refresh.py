"""The background metrics pass (``GPUQ_METRICS_REFRESH_S``): a scrape
renders the pass the app's refresher last made instead of computing one, and
during a database outage the scrape still fails with 503 once that
pass is older than the reuse age.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from app.main import start_metrics_refresh
from tests.integration.conftest import ADMIN_TOKEN, job_body
from tests.integration.test_metrics_outage import app_behind_a_proxy, pending
from tests.live_server import live_server

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def wait_for(what: str, ok: Callable[[], bool], limit_s: float = 60.0) -> None:
    """Poll until ``ok`` (a bound on waiting, not a timing assertion)."""
    end = time.monotonic() + limit_s
    while not ok():
        assert time.monotonic() < end, f"never happened: {what}"
        time.sleep(0.05)


def test_a_scrape_renders_the_background_pass(client):
    app = client.app
    assert client.post("/v1/jobs", headers=ADMIN, json=job_body()).status_code == 201
    app.state.metrics_max_age_s = 3600.0  # a pass of the refresher is always fresh enough
    loop = start_metrics_refresh(app, 0.05)
    assert loop is not None
    try:
        wait_for("two background passes", lambda: loop.passes >= 2)
    finally:
        assert loop.stop_and_wait()
    calls = []
    loop.run_once = lambda: calls.append(1)  # a scrape that computed would land here
    r = client.get("/metrics", headers=ADMIN)
    assert r.status_code == 200 and pending(r.text) == 1
    assert calls == []  # served from the refresher's pass


def test_refresh_off_means_scrapes_compute(client):
    assert start_metrics_refresh(client.app, 0) is None


def test_with_the_refresher_an_outage_is_still_503(database_url, demo, settings):
    proxy, engine, app = app_behind_a_proxy(database_url, settings)
    app.state.metrics_max_age_s = 1.0
    loop = None
    try:
        with live_server(app) as base, httpx.Client(base_url=base, timeout=20, headers=ADMIN) as c:
            assert c.post("/v1/jobs", headers=ADMIN, json=job_body()).status_code == 201
            loop = start_metrics_refresh(app, 0.1)
            wait_for("a pass that sees the job", lambda: pending(c.get("/metrics").text) == 1)
            proxy.cut()
            # within the reuse age a scrape may still render the last good pass; after
            # it, every scrape fails: the refresher's failed passes are never served
            wait_for("a 503 during the outage", lambda: c.get("/metrics").status_code == 503)
            r = c.get("/metrics")
            assert r.status_code == 503 and r.json() == {"detail": "database unavailable, retry"}
            proxy.restore()
            wait_for("a 200 after the outage", lambda: c.get("/metrics").status_code == 200)
    finally:
        if loop is not None:
            loop.stop_and_wait()  # its last pass ends before the engine and tables go
        proxy.close()
        engine.dispose()
