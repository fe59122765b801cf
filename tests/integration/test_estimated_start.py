"""Estimated start times on GET /v1/jobs/{id}, GET /v1/queue, the dashboard and the CLI:
computed by replaying the live snapshot forward, and right when the estimates are.

Real API, PostgreSQL and dispatcher on the simulated cluster with a manual clock.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from app.api.estimates import NEW_JOB_REFRESH_S, StartEstimator, pool_default_runtimes
from tests.integration.obs_env import AUTH, job, seeded_env, serving
from tests.integration.test_cli_client import gpuq


def iso(dt: datetime) -> str:
    return dt.isoformat().replace("+00:00", "Z")


def test_estimates_match_the_real_start_and_show_everywhere():
    with seeded_env() as env:
        c = env.client
        # a100-0: device 0 is cut into MIG slices, devices 1-3 are whole cards
        hold = env.submit(job("hold", "nlp", 2, "a100", duration=600))
        env.dispatch()
        wait = env.submit(job("wait", "nlp", 3, "a100", duration=60))
        env.submit(job("after", "nlp", 3, "a100", duration=60))
        env.advance(5)
        env.dispatch()
        started = datetime.fromisoformat(env.get(f"/v1/jobs/{hold['id']}")["admitted_at"])

        est = StartEstimator(env.services.session_factory, env.clock, 30, background=True)
        c.app.state.estimator = est
        est.refresh()
        body = env.get(f"/v1/jobs/{wait['id']}")
        assert body["status"] == "pending"
        expected = started + timedelta(seconds=600)
        assert datetime.fromisoformat(body["estimated_start"]) == expected
        queue = {q["name"]: q for q in env.get("/v1/queue")}
        assert datetime.fromisoformat(queue["wait"]["estimated_start"]) == expected
        assert datetime.fromisoformat(queue["after"]["estimated_start"]) == expected + timedelta(
            seconds=60
        )
        # a job that is not pending has none
        assert env.get(f"/v1/jobs/{hold['id']}")["estimated_start"] is None

        page = c.get("/ui/queue", headers=AUTH).text
        assert iso(expected) in page and "replay the queue" in page
        assert iso(expected) in c.get(f"/ui/jobs/{wait['id']}", headers=AUTH).text

        # the CLI shows it
        with serving(c.app) as url:
            r = gpuq(url, "queue")
        assert r.returncode == 0, r.stderr
        assert "est. start" in r.stdout and iso(expected) in r.stdout

        # the real dispatcher starts "wait" exactly when estimated (the clock is 5 s past
        # hold's start)
        env.advance(595)
        env.dispatch()
        env.dispatch()
        real = env.get(f"/v1/jobs/{wait['id']}")
        assert real["status"] in ("admitted", "running")
        assert abs(datetime.fromisoformat(real["admitted_at"]) - expected) <= timedelta(seconds=1)

        # stale estimates are refreshed in the background, never by the request itself
        env.advance(31)
        before = est.last
        env.get("/v1/queue")
        for _ in range(200):
            if est.last is not before:
                break
            time.sleep(0.05)
        assert est.last is not before and est.last.computed_at == env.clock().timestamp()


def _refreshed(est: StartEstimator, before) -> bool:
    """Whether the background refresh replaced ``before`` (waits up to 10 s for it)."""
    for _ in range(200):
        if est.last is not before:
            return True
        time.sleep(0.05)
    return False


def test_a_job_queued_after_the_replay_asks_for_an_early_one():
    """A job submitted (or requeued) after the last replay has no estimate in it; asking for
    that job refreshes early, once the replay is NEW_JOB_REFRESH_S old, instead of showing
    no start for up to the whole interval. A job the replay saw does not (fails on the
    code that refreshed only after the interval)."""
    with seeded_env() as env:
        env.submit(job("hold", "nlp", 2, "a100", duration=600))
        env.dispatch()
        seen = env.submit(job("seen", "nlp", 3, "a100", duration=60))
        est = StartEstimator(env.services.session_factory, env.clock, 30, background=True)
        env.client.app.state.estimator = est
        est.refresh()
        assert env.get(f"/v1/jobs/{seen['id']}")["estimated_start"] is not None

        env.advance(NEW_JOB_REFRESH_S / 2)
        late = env.submit(job("late", "nlp", 3, "a100", duration=60))
        before = est.last
        assert env.get(f"/v1/jobs/{late['id']}")["estimated_start"] is None
        time.sleep(0.3)
        assert est.last is before  # too soon: no refresh

        env.advance(NEW_JOB_REFRESH_S)  # older than the floor, far from the 30 s interval
        env.get(f"/v1/jobs/{seen['id']}")  # a job the replay saw asks for nothing
        time.sleep(0.3)
        assert est.last is before
        env.get("/v1/queue")  # lists late: the replay predates it
        assert _refreshed(est, before)
        assert env.get(f"/v1/jobs/{late['id']}")["estimated_start"] is not None


def test_pool_default_runtime_is_the_median_of_last_weeks_runs():
    with seeded_env() as env:
        for i, d in enumerate((100, 300, 900)):
            env.submit(job(f"r{i}", "cv", 1, "v100", duration=d))
        env.dispatch()
        for step in (100, 200, 600):  # the simulated cluster ends each run on time
            env.advance(step)
            env.dispatch()
        with env.services.session_factory() as s:
            defaults = pool_default_runtimes(s, env.clock())
        assert defaults == {"inference": 300.0}


def test_scenario_only_fields_are_refused_by_name():
    with seeded_env() as env:
        c = env.client
        r = c.post("/v1/jobs", json=job("x", "nlp", 1, "a100", runtime_s=5), headers=AUTH)
        assert r.status_code == 422 and r.json()["detail"].startswith("runtime_s: scenario-only")
        body = {"jobs": [job("a", "nlp", 1, "a100"), job("b", "nlp", 1, "a100",
                                                        speed={"a100": 2}, submit_at_s=3)]}
        r = c.post("/v1/jobs:batch", json=body, headers=AUTH)
        assert r.status_code == 422
        assert r.json()["detail"].startswith("jobs.1.submit_at_s, jobs.1.speed:")
        r = c.post("/v1/jobs", json=job("y", "nlp", 1, "a100", colour="red"), headers=AUTH)
        assert r.status_code == 422 and "colour" in r.json()["detail"]
        assert env.get("/v1/jobs")["items"] == []
