"""`gpuq serve` as a real process: the README walkthrough over HTTP.

Runs the installed command against the test database with a fast simulated
cluster, submits a job with an HTTP client as the README does with curl, and
follows it to `succeeded`. Polling has a generous bound; nothing asserts how
long a step took.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import truncate_all
from tests.ports import free_port

GPUQ = Path(sys.executable).with_name("gpuq")


def _wait_for(fn, timeout: float = 60.0, step: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(step)


@pytest.fixture
def server(engine, database_url, tmp_path):
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "GPUQ_DATA_DIR": str(tmp_path),
        "GPUQ_PORT": str(port),
        "GPUQ_SIM_SPEED": "20",
    }
    env.pop("GPUQ_ADMIN_TOKEN", None)
    proc = subprocess.Popen(
        [str(GPUQ), "serve"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    base = f"http://127.0.0.1:{port}"

    def up():
        try:
            return httpx.get(f"{base}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            if proc.poll() is not None:
                raise AssertionError(f"gpuq serve exited: {proc.stdout.read()}") from None
            return False

    try:
        _wait_for(up)
        yield base, (tmp_path / "admin_token").read_text().strip()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        truncate_all(engine)


def test_readme_walkthrough_against_gpuq_serve(server):
    base, token = server
    h = {"Authorization": f"Bearer {token}"}
    assert httpx.get(f"{base}/docs").status_code == 200
    body = {
        "name": "hello",
        "team": "nlp",
        "resources": {"gpus": 2, "gpu_types": ["a100-80g"]},
        "duration_estimate_s": 20,
    }
    r = httpx.post(f"{base}/v1/jobs", json=body, headers=h)
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]

    def job():
        return httpx.get(f"{base}/v1/jobs/{job_id}", headers=h).json()

    running = _wait_for(lambda: (j := job())["status"] in ("running", "succeeded") and j)
    assert running["allocations"] and running["allocations"][0]["gpu_type"] == "a100-80g"
    done = _wait_for(lambda: (j := job())["status"] == "succeeded" and j)
    assert done["allocations"][0]["released"] is True
    events = httpx.get(f"{base}/v1/jobs/{job_id}/events", headers=h).json()
    assert [e["type"] for e in events] == ["submitted", "admitted", "running", "succeeded"]

    # concurrent submits with one Idempotency-Key: one job, every caller gets it
    from concurrent.futures import ThreadPoolExecutor

    body2 = {**body, "name": "once"}
    hk = {**h, "Idempotency-Key": "same-key"}

    def submit(_):
        return httpx.post(f"{base}/v1/jobs", json=body2, headers=hk, timeout=30)

    with ThreadPoolExecutor(max_workers=6) as pool:
        replies = list(pool.map(submit, range(6)))
    assert all(r.status_code in (200, 201) for r in replies), [r.text for r in replies]
    assert len({r.json()["id"] for r in replies}) == 1
    assert sum(r.status_code == 201 for r in replies) == 1
    listed = httpx.get(f"{base}/v1/jobs", params={"limit": 500}, headers=h).json()["items"]
    assert [j["name"] for j in listed].count("once") == 1
