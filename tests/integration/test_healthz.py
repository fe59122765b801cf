"""/healthz is a liveness probe that can fail: a dispatcher pass stuck past
GPUQ_PASS_DEADLINE, or Kubernetes watches that stopped following the cluster, answer
503 with why (the kubelet restarts the process); /healthz never reads the database."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from app.main import create_app
from tests.fakekube.fixtures import make_cluster


def test_ok_while_the_loops_keep_passing(client, services, dispatcher):
    services.loops = [dispatcher]
    dispatcher.start(loops=1)
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok"}


def test_a_pass_stuck_past_its_deadline_fails_the_probe(client, services, dispatcher):
    services.loops = [dispatcher]
    deadline = services.settings.pass_deadline_s
    dispatcher.pass_started = time.monotonic() - deadline - 1
    r = client.get("/healthz")
    assert r.status_code == 503
    assert "dispatcher: pass running for" in r.json()["detail"]


def test_no_pass_ended_for_too_long_fails_the_probe(client, services, dispatcher):
    services.loops = [dispatcher]
    dispatcher.last_pass_end = time.monotonic() - services.settings.pass_deadline_s - 5
    r = client.get("/healthz")
    assert r.status_code == 503 and "no pass ended for" in r.json()["detail"]


def test_watches_that_do_not_follow_the_cluster_fail_the_probe(services, dispatcher, kube):
    """Informers that never listed (or stopped making progress): unhealthy."""
    services.loops = [dispatcher]
    services.cluster = make_cluster(kube)  # informers not started: nothing listed
    with TestClient(create_app(services=services)) as c:
        r = c.get("/healthz")
    assert r.status_code == 503
    assert "informer nodes: not listed yet" in r.json()["detail"]
