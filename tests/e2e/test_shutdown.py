"""SIGTERM stops `gpuq serve`, `gpuq api` and `gpuq dispatcher` within 10 s
(the dispatcher used to join its LISTEN thread forever).

Real processes against the test database; the dispatcher runs on the fake
Kubernetes API server as the leader, so its leader lock must be released.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import httpx
import psycopg
import pytest
import yaml

from app.dispatch.leader import lock_key
from tests.conftest import truncate_all
from tests.e2e.test_serve import GPUQ, _wait_for
from tests.fakekube.fixtures import kube  # noqa: F401 - a fixture
from tests.fakekube.objects import article_a100
from tests.faults import admin_conninfo
from tests.ports import free_port

EXIT_WITHIN_S = 10.0


def _leader_lock_held(database_url: str) -> bool:
    key = lock_key("gpuq-dispatcher")
    with psycopg.connect(admin_conninfo(database_url), autocommit=True) as c:
        row = c.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND objid = (%s::bigint & 4294967295)::oid "
            "AND classid = ((%s::bigint >> 32) & 4294967295)::oid",
            (key, key),
        ).fetchone()
    return bool(row and row[0])


def _terminate_and_time(proc: subprocess.Popen) -> float:
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=EXIT_WITHIN_S + 20)
    except subprocess.TimeoutExpired:
        proc.kill()
        out = proc.communicate()[0]
        raise AssertionError(
            f"still running {EXIT_WITHIN_S + 20:.0f} s after SIGTERM:\n{out}"
        ) from None
    return time.monotonic() - t0


@pytest.mark.parametrize("command", ["serve", "api"])
def test_sigterm_stops_the_http_processes(command, engine, database_url, tmp_path):
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "GPUQ_DATA_DIR": str(tmp_path),
        "GPUQ_PORT": str(port),
        "GPUQ_ADMIN_TOKEN": "shutdown-test-admin-token-0123456789abcdef",
    }
    proc = subprocess.Popen(
        [str(GPUQ), command], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        def up() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"gpuq {command} exited: {proc.stdout.read()}")
            try:
                return httpx.get(f"{base}/readyz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        _wait_for(up)
        # a keep-alive client with an open connection must not hold the exit up
        auth = {"Authorization": "Bearer shutdown-test-admin-token-0123456789abcdef"}
        with httpx.Client(base_url=base, headers=auth) as c:
            assert c.get("/v1/jobs").status_code == 200
            took = _terminate_and_time(proc)
        # uvicorn re-raises the signal it handled once its shutdown is complete
        out = proc.stdout.read()
        assert proc.returncode in (0, -signal.SIGTERM), out
        assert "Application shutdown complete" in out
        assert took < EXIT_WITHIN_S
    finally:
        if proc.poll() is None:
            proc.kill()
        truncate_all(engine)


def test_sigterm_stops_the_leading_dispatcher(kube, engine, database_url, tmp_path):  # noqa: F811
    kube.add_node(article_a100("a100-0"))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": kube.url}}],
        "users": [{"name": "gpuq", "user": {"token": "test-token"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "gpuq"}}],
    }))
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "GPUQ_DATA_DIR": str(tmp_path),
        "GPUQ_ADMIN_TOKEN": "shutdown-test-admin-token-0123456789abcdef",
        "GPUQ_CLUSTER": "kubernetes",
        "KUBECONFIG": str(kubeconfig),
        "GPUQ_K8S_WATCH_TIMEOUT_S": "2",
    }
    env.pop("KUBERNETES_SERVICE_HOST", None)
    proc = subprocess.Popen(
        [str(GPUQ), "dispatcher"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        def leading() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"gpuq dispatcher exited: {proc.stdout.read()}")
            return _leader_lock_held(database_url)

        _wait_for(leading)
        took = _terminate_and_time(proc)
        assert proc.returncode == 0, proc.stdout.read()
        assert took < EXIT_WITHIN_S
        assert not _leader_lock_held(database_url)
    finally:
        if proc.poll() is None:
            proc.kill()
        truncate_all(engine)
