"""Cost of observability on a loaded database, against the dispatcher's own read.

Seeds a fresh PostgreSQL database (own name, dropped at the end) with the
demo cluster and N pending, N running and N finished jobs, then times:

- baseline: ``build_snapshot`` (what every dispatcher cycle reads);
- one ``/metrics`` refresh (``MetricsLoop.run_once``: snapshot, utilization,
  leases, fairness alerts over the last hour, histograms);
- ``GET /v1/reports/fairness`` (24 h window) and ``/v1/reports/utilization``;
- one tuner what-if replay (current state + recent arrivals, one weight set).

Run: ``TEST_DATABASE_URL=postgresql+psycopg://postgres@127.0.0.1/test
.venv/bin/python bench/obs.py [--jobs 2000]`` (uses DATABASE_URL if that is set instead).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from sqlalchemy import create_engine, insert, text  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from app.clock import to_epoch  # noqa: E402
from app.dispatch.metrics import MetricsLoop  # noqa: E402
from app.dispatch.tuner import recent_arrivals  # noqa: E402
from app.domain.config import load_config_text  # noqa: E402
from app.metrics import GpuqMetrics  # noqa: E402
from app.reports.live import live_fairness, live_utilization  # noqa: E402
from app.runtime import demo_config_text  # noqa: E402
from app.scheduling.policies import get_policy  # noqa: E402
from app.store import migrate  # noqa: E402
from app.store.config_loader import apply_config, ensure_priority_classes  # noqa: E402
from app.store.db import make_engine, make_session_factory, normalize_url  # noqa: E402
from app.store.orm import AllocationRow, JobEventRow, JobRow  # noqa: E402
from app.store.snapshot import build_snapshot  # noqa: E402
from app.tuning.whatif import make_replay  # noqa: E402

NOW = datetime(2026, 6, 1, tzinfo=UTC)
TEAMS = [("nlp", "training", "a100-80g"), ("recsys", "inference", "rtx4090-24g"),
         ("research", "mixed", "v100-16g")]


def timed(fn, repeat: int = 3) -> float:
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def seed(sf, n: int) -> None:
    pending, running, finished, events, allocs = [], [], [], [], []
    for i in range(3 * n):
        team, pool, gtype = TEAMS[i % 3]
        spec = {"name": f"j{i}", "team": team, "resources": {"gpus": 1, "gpu_types": [gtype]},
                "duration_estimate_s": 600}
        sub = NOW - timedelta(seconds=60 + (i * 37) % 20_000)
        row = dict(name=f"j{i}", team=team, pool=pool, priority="P1", spec=spec, units=1.0,
                   submitted_at=sub, waited_s=0.0, preemption_count=0)
        kind = i % 3
        if kind == 0:
            pending.append({**row, "status": "pending", "queued_at": sub})
        elif kind == 1:
            finished.append({**row, "status": "succeeded", "waited_s": (i * 13) % 900,
                             "admitted_at": sub + timedelta(seconds=(i * 13) % 900),
                             "finished_at": sub + timedelta(seconds=(i * 13) % 900 + 300)})
        else:
            running.append({**row, "status": "running", "waited_s": 5.0,
                            "admitted_at": sub + timedelta(seconds=5),
                            "started_at": sub + timedelta(seconds=5)})
    with sf() as s:
        s.execute(insert(JobRow), pending)
        fin_ids = s.scalars(insert(JobRow).returning(JobRow.id), finished).all()
        run_ids = s.scalars(insert(JobRow).returning(JobRow.id), running).all()
        for jid, row in zip(fin_ids, finished, strict=True):
            gtype = row["spec"]["resources"]["gpu_types"][0]
            events.append(dict(job_id=jid, at=row["admitted_at"], type="admitted",
                               from_status="pending", to_status="admitted",
                               data={"placements": [{"gpu_type": gtype, "node": "x"}]}))
        s.execute(insert(JobEventRow), events)
        # running jobs hold one card each, spread over the demo nodes (no double use)
        slots = {"a100-80g": [("a100-1", d) for d in range(8)],
                 "v100-16g": [(f"v100-{k}", d) for k in range(2) for d in range(8)],
                 "rtx4090-24g": [(f"rtx4090-{k}", d) for k in range(3) for d in range(8)]}
        for jid, row in zip(run_ids, running, strict=True):
            gtype = row["spec"]["resources"]["gpu_types"][0]
            if slots[gtype]:
                node, dev = slots[gtype].pop()
                allocs.append(dict(job_id=jid, replica=0, node=node, gpu_type=gtype,
                                   devices=[dev], mig=[], units=1.0, pool=row["pool"]))
            else:
                s.execute(text("UPDATE jobs SET status='pending', queued_at=submitted_at "
                               "WHERE id=:i"), {"i": jid})
        if allocs:
            s.execute(insert(AllocationRow), allocs)
        s.commit()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2000, help="jobs per state (x3 in total)")
    args = ap.parse_args()
    base = os.environ.get("DATABASE_URL") or os.environ.get("TEST_DATABASE_URL")
    if not base:
        print("set TEST_DATABASE_URL (or DATABASE_URL) to a PostgreSQL server", file=sys.stderr)
        return 2
    url = make_url(normalize_url(base))
    name = f"gpuq_bench_obs_{uuid.uuid4().hex[:8]}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    engine = make_engine(url.set(database=name).render_as_string(hide_password=False))
    try:
        migrate.upgrade(engine)
        sf = make_session_factory(engine)
        with sf() as s:
            ensure_priority_classes(s)
            apply_config(s, load_config_text(demo_config_text()))
            s.commit()
        seed(sf, args.jobs)
        print(f"machine: {platform.machine()}, {os.cpu_count()} cores, "
              f"Python {platform.python_version()}")
        print(f"database: {3 * args.jobs} jobs ({args.jobs} pending / running-or-pending / "
              "finished), demo cluster (7 nodes)")

        def snapshot():
            with sf() as s:
                return build_snapshot(s, NOW)

        base_t = timed(snapshot)
        loop = MetricsLoop(sf, GpuqMetrics(), clock=lambda: NOW)
        metrics_t = timed(loop.run_once)

        def fairness():
            with sf() as s:
                live_fairness(s, NOW, 24 * 3600.0)

        def util():
            with sf() as s:
                live_utilization(s, NOW)

        fair_t = timed(fairness)
        util_t = timed(util)
        with sf() as s:
            snap = build_snapshot(s, NOW).snapshot
            arrivals = recent_arrivals(s, snap, NOW, 3600.0)
        head = sorted(snap.pending, key=lambda j: (-j.priority_value, j.submitted_at))[:2000]
        snap.pending = head
        replay = make_replay(snap, arrivals, policy=get_policy("gpuq"), horizon_s=7200.0)
        weights = {k: t.weight for k, t in snap.gpu_types.items()}
        t0 = time.perf_counter()
        out = replay(weights)
        replay_t = time.perf_counter() - t0
        print(f"{'what':44s} {'seconds':>9s} {'x baseline':>11s}")
        rows = [
            ("baseline: build_snapshot (dispatcher read)", base_t),
            ("/metrics refresh (MetricsLoop.run_once)", metrics_t),
            ("/v1/reports/fairness (24 h window)", fair_t),
            ("/v1/reports/utilization", util_t),
            (f"tuner what-if replay ({out.jobs} jobs, 1 set)", replay_t),
        ]
        for label, t in rows:
            print(f"{label:44s} {t:9.3f} {t / base_t:11.2f}")
        print(f"(median of 3 runs except the replay; snapshot at {to_epoch(NOW):.0f})")
    finally:
        engine.dispose()
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
