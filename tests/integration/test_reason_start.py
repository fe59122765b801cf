"""The estimated start wherever the reason knows a time: GET /v1/jobs (the team list),
GET /v1/jobs/{id}, GET /v1/queue, the queue page and the CLI show the start the pending
reason names ("may be preempted for it in 50 s"), stored beside the reason by the
dispatcher (jobs.reason_start_at), not parsed out of it. Before, the list and the queue
showed null/"-" while the reason said "in 50 s" whenever the replay had no estimate.

Real API, PostgreSQL and dispatcher on the simulated cluster with a manual clock; the
API and the CLI through a real server."""

from __future__ import annotations

import json
import urllib.request
from datetime import datetime, timedelta

from sqlalchemy import text

from tests.integration.obs_env import ADMIN, AUTH, job, seeded_env, serving
from tests.integration.test_cli_client import gpuq

CONFIG_60 = """
gpu_types:
  - {name: a100, memory_gb: 80, weight: 10}
  - {name: v100, memory_gb: 16, weight: 4}
nodes:
  - {name: a100-0, gpu_type: a100, gpus: 4, cpu: 64, memory_gb: 512}
  - {name: v100-0, gpu_type: v100, gpus: 4, cpu: 64, memory_gb: 512}
pools:
  - {name: training, gpu_types: [a100, v100], guaranteed: {a100: 30}}
  - {name: inference, gpu_types: [v100], guaranteed: {v100: 16}}
teams:
  - {name: nlp, pool: training, quota_units: 1000, default_priority: P1}
  - {name: cv, pool: inference, quota_units: 1000, default_priority: P2}
scheduler: {min_run_time_s: 60}
"""


def _get(url: str, path: str):
    req = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {ADMIN}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def test_reason_time_is_the_estimated_start_on_every_route():
    with seeded_env(CONFIG_60) as env:
        c = env.client
        fresh = env.submit(job("fresh", "cv", 4, "v100", duration=3600))
        env.dispatch()
        admitted = datetime.fromisoformat(env.get(f"/v1/jobs/{fresh['id']}")["admitted_at"])
        env.advance(10)
        urgent = env.submit(job("urgent", "nlp", 4, "v100", duration=600))
        env.dispatch()
        expected = admitted + timedelta(seconds=60)  # fresh's protection ends
        reason = env.get(f"/v1/jobs/{urgent['id']}")["reason"]
        assert (f"job(s) {fresh['id']} ran less than min_run_time_s (60 s): may be "
                "preempted for it in 50 s") in reason
        # the app's estimator has never replayed (no background loops here): only the
        # reason knows the time
        with serving(c.app) as url:
            listed = _get(url, "/v1/jobs?team=nlp")["items"]
            [u] = [j for j in listed if j["id"] == urgent["id"]]
            assert datetime.fromisoformat(u["estimated_start"]) == expected
            one = _get(url, f"/v1/jobs/{urgent['id']}")
            assert datetime.fromisoformat(one["estimated_start"]) == expected
            [q] = _get(url, "/v1/queue?team=nlp")
            assert datetime.fromisoformat(q["estimated_start"]) == expected
            iso = expected.isoformat().replace("+00:00", "Z")
            r = gpuq(url, "queue")
            assert r.returncode == 0, r.stderr
            assert iso in r.stdout
            r = gpuq(url, "jobs", "--team", "nlp")
            assert r.returncode == 0, r.stderr
            assert "est. start" in r.stdout and iso in r.stdout
        assert iso in c.get("/ui/queue", headers=AUTH).text
        with env.services.session_factory() as s:
            stored = s.scalar(text("SELECT reason_start_at FROM jobs WHERE id = :i"),
                              {"i": int(urgent["id"])})
        assert stored == expected
        # the reason's time comes true, and a state change clears it
        env.advance(50)
        env.dispatch()
        body = env.get(f"/v1/jobs/{urgent['id']}")
        assert body["status"] in ("admitted", "running")
        assert datetime.fromisoformat(body["admitted_at"]) == expected
        with env.services.session_factory() as s:
            left = s.scalar(text("SELECT reason_start_at FROM jobs WHERE id = :i"),
                            {"i": int(urgent["id"])})
            assert left is None
            # the preempted job's new reason names no start of its own
            back = s.execute(text("SELECT status, reason_start_at FROM jobs WHERE id = :i"),
                             {"i": int(fresh["id"])}).one()
        assert back.status == "pending" and back.reason_start_at is None
