"""The reason's code beside its message, wherever the API and the pages show a reason.

``GET /v1/jobs/{id}``, ``GET /v1/jobs``, ``GET /v1/queue``, a job's events, the queue
page and the job page carry ``reason_code`` (the core's ``ReasonCode`` value, stored by
the dispatcher in ``jobs.reason_code`` and ``job_events.reason_code``, migration 0014),
so a client can tell "waits for its team's quota" from "waits for capacity" without
reading the words. Before, only the message was there (every assertion on
``reason_code`` below fails on the old code: the field did not exist). A reason the core
did not give (a cancel) has none; a pending job whose stored code is missing (a row an
older release wrote) gets it back at the next cycle although its words did not change.

Real API, PostgreSQL and dispatcher on the simulated cluster with a manual clock."""

from __future__ import annotations

from sqlalchemy import text

from app.dispatch.dispatcher import Dispatcher
from app.scheduling.verdicts import ReasonCode
from tests.integration.obs_env import AUTH, job, seeded_env

CONFIG = """
gpu_types:
  - {name: a100, memory_gb: 80, weight: 10}
  - {name: v100, memory_gb: 16, weight: 4}
nodes:
  - {name: a100-0, gpu_type: a100, gpus: 4, cpu: 64, memory_gb: 512}
  - {name: v100-0, gpu_type: v100, gpus: 4, cpu: 64, memory_gb: 512}
pools:
  - {name: training, gpu_types: [a100, v100]}
teams:
  - {name: nlp, pool: training, quota_units: 40, default_priority: P1}
  - {name: cv, pool: training, quota_units: 1000, default_priority: P2}
scheduler: {min_run_time_s: 60}
"""


def test_the_code_is_beside_the_reason_on_every_route():
    with seeded_env(CONFIG) as env:
        c = env.client
        ran = env.submit(job("ran", "nlp", 4, "a100", duration=3600))  # the team's 40 CU
        env.dispatch()
        over = env.submit(job("over", "nlp", 1, "v100", duration=600))  # 4 CU more
        env.dispatch()
        one = env.get(f"/v1/jobs/{over['id']}")
        assert one["status"] == "pending"
        assert one["reason_code"] == ReasonCode.TEAM_QUOTA.value, one["reason"]
        assert env.get(f"/v1/jobs/{ran['id']}")["reason_code"] is None  # running
        listed = {j["id"]: j for j in env.get("/v1/jobs", team="nlp")["items"]}
        assert listed[over["id"]]["reason_code"] == "team_quota"
        queue = c.get("/v1/queue", headers=AUTH).json()
        assert [(q["id"], q["reason_code"]) for q in queue] == [(over["id"], "team_quota")]
        assert 'class="tag reason-code">team_quota</span>' in c.get(
            "/ui/queue", headers=AUTH).text
        assert 'class="tag reason-code">team_quota</span>' in c.get(
            f"/ui/jobs/{over['id']}", headers=AUTH).text

        # a P0 job preempts cv's job: the victim's event carries the stop's code
        victim = env.submit(job("victim", "cv", 4, "v100", duration=3600))
        env.dispatch()
        env.advance(61)  # past min_run_time_s
        env.submit(job("urgent", "cv", 4, "v100", duration=600, priority="P0"))
        env.dispatch()
        events = c.get(f"/v1/jobs/{victim['id']}/events", headers=AUTH).json()
        stops = [e for e in events if e["type"] == "preempted"]
        assert [e["reason_code"] for e in stops] == ["preempted"], events
        submitted = [e for e in events if e["type"] == "submitted"]
        assert [e["reason_code"] for e in submitted] == [None]

        # a reason the core did not give has no code
        r = c.post(f"/v1/jobs/{over['id']}/cancel", headers=AUTH)
        assert r.status_code == 200, r.text
        body = env.get(f"/v1/jobs/{over['id']}")
        assert body["status"] == "cancelled" and body["reason"]
        assert body["reason_code"] is None

        # the right words beside no code or a stale one (an older release changes the
        # words only) are rewritten by the next leader although the words are the same
        late = env.submit(job("late", "nlp", 1, "v100", duration=600))
        also = env.submit(job("also", "nlp", 1, "v100", duration=600))
        env.dispatch()
        assert env.get(f"/v1/jobs/{late['id']}")["reason_code"] == "team_quota"
        with env.services.session_factory() as s:
            for jid, code in ((late["id"], None), (also["id"], "capacity")):
                s.execute(text("UPDATE jobs SET reason_code = :c WHERE id = :i"),
                          {"i": int(jid), "c": code})
            s.commit()
        env.advance(1)
        Dispatcher(env.services.session_factory, env.cluster, clock=env.clock).run_once()
        for jid in (late["id"], also["id"]):
            assert env.get(f"/v1/jobs/{jid}")["reason_code"] == "team_quota"
