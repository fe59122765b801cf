"""Incremental metrics and windowed reports equal a full recomputation.

A generated history (random submits of three priorities, cancellations of
pending and running jobs, P0 work preempting P2, jobs finishing) is run
through the real API, dispatcher and simulated cluster. Along the way
``/metrics``-style passes run at random moments, and "restarts" start new
metrics loops (fresh registries) mid-history. At the end each loop's
histograms and stop counters must equal a recomputation from the complete
``job_events`` table by an independent walk, over the loop's window; each
job's observed waits must add up to its ``waited_s``; and the fairness report
read through the indexed window must equal the report over every job
filtered in Python.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from datetime import timedelta

import pytest
from sqlalchemy import select, text

from app.dispatch.metrics_loop import MetricsLoop
from app.metrics import JCT_BUCKETS, WAIT_BUCKETS, GpuqMetrics
from app.reports.event_feed import EventFeed
from app.reports.fairness import fairness_report
from app.reports.queries import job_records
from app.reports.records import JobRecord
from app.reports.window import WindowRecords
from app.scheduling.verdicts import from_stored
from app.store.orm import JobEventRow, JobRow
from tests.integration.obs_env import job, seeded_env

CONFIG = """
gpu_types:
  - {name: a100, memory_gb: 80, weight: 10}
  - {name: v100, memory_gb: 16, weight: 4}
nodes:
  - {name: a100-0, gpu_type: a100, gpus: 4, cpu: 64, memory_gb: 512}
  - {name: v100-0, gpu_type: v100, gpus: 4, cpu: 64, memory_gb: 512}
pools:
  - {name: training, gpu_types: [a100, v100], guaranteed: {a100: 40, v100: 16}}
teams:
  - {name: nlp, pool: training, default_priority: P1}
  - {name: cv, pool: training, default_priority: P2}
"""


def samples(metrics: GpuqMetrics) -> dict:
    out = {}
    for fam in metrics.registry.collect():
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue
            if s.name.startswith(("gpuq_queue_wait", "gpuq_job_completion")) or s.name in (
                "gpuq_preemptions_total",
                "gpuq_lease_reclaims_total",
            ):
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def recompute(session, since) -> tuple[GpuqMetrics, dict[int, float]]:
    """Every observation from the whole event table, by walking each job's events."""
    m = GpuqMetrics()
    jobs = {j.id: j for j in session.scalars(select(JobRow))}
    acc: dict[int, float] = defaultdict(float)  # pending seconds since the last admission
    prev: dict[int, JobEventRow] = {}
    waited: dict[int, float] = defaultdict(float)  # every observed wait, per job
    for ev in session.scalars(select(JobEventRow).order_by(JobEventRow.id)):
        j = jobs[ev.job_id]
        p = prev.get(ev.job_id)
        if p is not None and p.to_status == "pending":
            acc[ev.job_id] += (ev.at - p.at).total_seconds()
        prev[ev.job_id] = ev
        counted = ev.at >= since
        if ev.from_status == "pending" and ev.to_status == "admitted":
            waited[ev.job_id] += acc[ev.job_id]
            if counted:
                m.observe_wait(j.pool, j.priority, j.team, acc[ev.job_id])
            acc[ev.job_id] = 0.0
        elif (
            ev.to_status == "succeeded" and ev.from_status in ("admitted", "running") and counted
        ):
            jct = (ev.at - j.submitted_at).total_seconds()
            m.observe_completion(j.pool, j.priority, j.team, jct)
        if ev.type in ("preempted", "reclaimed") and counted:
            m.record_stop(ev.type, from_stored(ev.reason, ev.reason_code))
    return m, waited


def assert_same(got: dict, want: dict) -> None:
    assert set(got) == set(want), sorted(set(got) ^ set(want))
    for key, value in want.items():
        assert got[key] == pytest.approx(value, abs=1e-6), key


@pytest.fixture(scope="module")
def history():
    rng = random.Random(13)
    with seeded_env(CONFIG) as env:
        loops: list[tuple[MetricsLoop, object]] = []

        def start_loop(backfill_s: float) -> None:
            loop = MetricsLoop(
                env.services.session_factory,
                GpuqMetrics(),
                clock=env.clock,
                backfill_s=backfill_s,
            )
            loop.run_once()
            loops.append((loop, env.clock() - timedelta(seconds=backfill_s)))

        start_loop(10**7)
        # report caches as a server keeps them (the second never re-reads in full), asked
        # at random moments for random windows; each answer is checked against a full read
        windows = [WindowRecords(), WindowRecords(full_reload_s=10**9)]
        checks: list[tuple[float, list, list]] = []

        def check_windows() -> None:
            now = env.clock()
            with env.services.session_factory() as s:
                for w in windows:
                    window_s = rng.choice((60.0, 600.0, 3000.0, 86400.0))
                    got = w.records(s, now, window_s)
                    want = [
                        r for r in job_records(s, now, None)
                        if r.active_since(now.timestamp() - window_s)
                    ]
                    checks.append((window_s, sorted(got, key=_key), sorted(want, key=_key)))

        ids: list[str] = []
        for step in range(90):
            for _ in range(rng.choice((0, 1, 1, 2, 3))):
                team = rng.choice(("nlp", "cv"))
                gpu_type = rng.choice(("a100", "v100"))
                prio = rng.choice(("P0", "P1", "P2", "P2")) if team == "nlp" else "P2"
                spec = job(
                    f"j{len(ids)}", team, rng.choice((1, 2, 4)), gpu_type,
                    duration=rng.choice((30.0, 90.0, 400.0)), priority=prio,
                )
                ids.append(env.submit(spec)["id"])
            if ids and rng.random() < 0.15:
                r = env.client.post(
                    f"/v1/jobs/{rng.choice(ids)}/cancel",
                    headers={"Authorization": "Bearer admin-test-token"},
                )
                assert r.status_code in (200, 409), r.text
            env.advance(rng.choice((5.0, 20.0, 60.0, 150.0)))
            env.dispatch()
            for loop, _ in loops:
                if rng.random() < 0.4:
                    loop.run_once()
            if rng.random() < 0.3:
                check_windows()
            if step in (30, 60):  # a restart: a new process backfills its window
                start_loop(10**7 if step == 30 else 900.0)
        for loop, _ in loops:
            loop.run_once()
        check_windows()
        yield env, loops, checks


def _key(r: JobRecord) -> str:
    return r.id


def test_history_has_what_the_claim_is_about(history):
    env, _, _ = history
    with env.services.session_factory() as s:
        kinds = dict(
            s.execute(text("SELECT type, count(*) FROM job_events GROUP BY type")).all()
        )
    assert kinds.get("preempted", 0) >= 2, kinds
    assert kinds.get("cancelled", 0) >= 2, kinds
    assert kinds.get("succeeded", 0) >= 10, kinds


def test_incremental_histograms_equal_full_recomputation(history):
    env, loops, _ = history
    with env.services.session_factory() as s:
        for loop, since in loops:
            want, _ = recompute(s, since)
            assert_same(samples(loop.metrics), samples(want))


def test_observed_waits_add_up_to_waited_s(history):
    env, _, _ = history
    with env.services.session_factory() as s:
        _, waited = recompute(s, env.clock() - timedelta(days=365))
        for j in s.scalars(select(JobRow).where(JobRow.admitted_at.is_not(None))):
            assert waited[j.id] == pytest.approx(j.waited_s, abs=1e-6), j.name


def test_windowed_report_equals_report_over_all_jobs(history):
    env, _, _ = history
    now = env.clock()
    with env.services.session_factory() as s:
        everything = job_records(s, now, None)
        for window in (60.0, 600.0, 3000.0, 10**6):
            windowed = job_records(s, now, window)
            got = fairness_report(windowed, now=now.timestamp(), window_s=window)
            want = fairness_report(everything, now=now.timestamp(), window_s=window)
            assert got == want
            assert len(windowed) < len(everything) or window == 10**6


def test_kept_report_windows_equal_a_full_read_at_every_moment(history):
    """WindowRecords (what the report routes use) re-reads only the jobs written since
    its last call; at random moments of the history, across cancellations,
    preemptions and requeues, its records equal a full read filtered in Python."""
    _, _, checks = history
    assert len(checks) >= 20
    assert {w for w, _, _ in checks} == {60.0, 600.0, 3000.0, 86400.0}
    for window_s, got, want in checks:
        assert got == want, window_s
    assert any(len(want) > 10 for _, _, want in checks)


def test_a_kept_window_reads_only_what_changed(history):
    """Nothing was written since the first look, so the second reads no row.

    The watermark is the first look's ``pg_snapshot_xmin``, which is server-wide: a
    transaction of another database on the same server that is open during the first
    look rightly makes the second re-read the rows after it (they might not have been
    visible). So the pair of looks is tried a few times; a refresh that re-reads what
    it kept (an off-by-one watermark, a full re-read) fails every try."""
    env, _, _ = history
    now = env.clock()
    rereads = []
    for _ in range(5):
        w = WindowRecords()
        with env.services.session_factory() as s:
            first = w.records(s, now, 86400.0)
            assert w.last_rows == len(first)  # the first call reads its window
            again = w.records(s, now, 86400.0)
            assert sorted(again, key=_key) == sorted(first, key=_key)
            rereads.append(w.last_rows)
            if w.last_rows == 0:
                w.records(s, now, 600.0)  # a shorter window is served from what is kept
                assert w.last_rows == 0
                return
        time.sleep(0.5)
    raise AssertionError(f"the second look re-read rows every time: {rereads}")


def test_buckets_are_the_documented_ones():
    assert WAIT_BUCKETS[0] == 1 and JCT_BUCKETS[-1] == 259200


def test_feed_reads_an_event_committed_after_a_later_one(history):
    env, _, _ = history
    sf = env.services.session_factory
    feed = EventFeed(gap_timeout_s=3600)
    with sf() as s:
        feed.read(s, env.clock())  # nothing after now: cursor at the end
        jid = s.scalar(select(JobRow.id).limit(1))
    at = env.clock() + timedelta(seconds=1)
    slow, fast = sf(), sf()
    try:
        slow.add(JobEventRow(job_id=jid, at=at, type="preempted", reason="preempted by job 1"))
        slow.flush()  # takes the lower id, commits last
        fast.add(JobEventRow(job_id=jid, at=at, type="reclaimed", reason="lease 1 expired"))
        fast.commit()
        with sf() as s:
            assert [e.type for e in feed.read(s, at)] == ["reclaimed"]
            assert len(feed.missing) == 1
        slow.commit()
        with sf() as s:
            assert [e.type for e in feed.read(s, at)] == ["preempted"]
            assert not feed.missing
            assert feed.read(s, at) == []
        # an id that never commits is forgotten after the timeout
        rolled = sf()
        rolled.add(JobEventRow(job_id=jid, at=at, type="preempted", reason="x"))
        rolled.flush()
        rolled.rollback()
        with sf() as s:
            fast2 = JobEventRow(job_id=jid, at=at, type="bound")
            s.add(fast2)
            s.commit()
            feed.read(s, at)
            assert len(feed.missing) == 1
            feed.gap_timeout_s = 0.0
            feed.read(s, at)
            assert not feed.missing
    finally:
        slow.close()
        fast.close()
