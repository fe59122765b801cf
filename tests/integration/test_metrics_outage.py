"""``/metrics`` during a database outage: the scrape fails with a
503 and ``Retry-After`` for the whole outage (Prometheus's ``up`` goes to 0,
so the alert on it fires) instead of serving the gauges of before the outage
with a 200, and serves current values again once the database is back.

The outage is the TCP proxy of tests/faults.py being cut: open connections
reset, new ones refused.
"""

from __future__ import annotations

import time

import httpx
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine

from app.clock import utcnow
from app.main import create_app
from app.runtime import Services
from app.store.db import make_engine, make_session_factory
from tests.faults import TcpProxy
from tests.integration.conftest import ADMIN_TOKEN, job_body
from tests.live_server import live_server

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def app_behind_a_proxy(database_url: str, settings) -> tuple[TcpProxy, Engine, FastAPI]:
    """An app whose database connections go through a proxy the test can cut (an
    outage); small pool and timeouts so a failing request ends fast. The caller
    disposes the engine and closes the proxy."""
    proxy = TcpProxy.in_front_of(database_url)
    engine = make_engine(proxy.url_for(database_url), pool_size=2, pool_timeout_s=2,
                         connect_timeout_s=2)
    services = Services(settings=settings, engine=engine,
                        session_factory=make_session_factory(engine), cluster=None,
                        clock=utcnow, admin_token=ADMIN_TOKEN)
    return proxy, engine, create_app(services=services)


def pending(text: str) -> float:
    return sum(
        s.value
        for fam in text_string_to_metric_families(text)
        if fam.name == "gpuq_pending_jobs"
        for s in fam.samples
    )


def test_metrics_fail_during_an_outage_and_recover(database_url, demo, settings):
    proxy, engine, app = app_behind_a_proxy(database_url, settings)
    app.state.metrics_max_age_s = 0  # every scrape reads the database
    try:
        with live_server(app) as base, httpx.Client(base_url=base, timeout=20, headers=ADMIN) as c:
            assert c.post("/v1/jobs", headers=ADMIN, json=job_body()).status_code == 201
            r = c.get("/metrics")
            assert r.status_code == 200 and pending(r.text) == 1

            proxy.cut()
            for _ in range(4):  # every scrape of the outage, not only the first
                r = c.get("/metrics")
                assert r.status_code == 503, r.text
                assert r.json() == {"detail": "database unavailable, retry"}
                assert r.headers["retry-after"].isdigit()

            proxy.restore()
            t0 = time.monotonic()
            while (r := c.get("/metrics")).status_code != 200:
                assert r.status_code == 503, r.text
                assert time.monotonic() - t0 < 10, "/metrics still failing after recovery"
                time.sleep(0.1)
            assert pending(r.text) == 1
            assert c.post("/v1/jobs", headers=ADMIN, json=job_body("b")).status_code == 201
            assert pending(c.get("/metrics").text) == 2
    finally:
        engine.dispose()
        proxy.close()


def test_a_failed_pass_is_not_reused(database_url, demo, settings):
    """A scrape after a failed one runs a pass of its own, however long passes
    are reused (it used to reuse the failed pass and serve what the gauges held
    before it, here nothing)."""
    proxy, engine, app = app_behind_a_proxy(database_url, settings)
    app.state.metrics_max_age_s = 3600.0  # a successful pass is reused all test long
    try:
        with live_server(app) as base, httpx.Client(base_url=base, timeout=20, headers=ADMIN) as c:
            assert c.post("/v1/jobs", headers=ADMIN, json=job_body()).status_code == 201
            proxy.cut()
            assert c.get("/metrics").status_code == 503
            proxy.restore()
            t0 = time.monotonic()
            while (r := c.get("/metrics")).status_code != 200:
                assert time.monotonic() - t0 < 10, "/metrics still failing after recovery"
                time.sleep(0.1)
            assert pending(r.text) == 1  # a pass of its own, not the failed one
    finally:
        engine.dispose()
        proxy.close()
