"""What monitoring and reports cost on a server with weeks of history.

Builds its own history through the API (``bench/history.py``: 100,000 jobs
over 14 days by default, through ``POST /v1/jobs:batch``, run by the real
dispatcher and simulated cluster, ~3,000 left pending), then times over HTTP
against a real uvicorn server, P50 of ``--repeat`` calls each:

- ``GET /metrics`` with every scrape recomputing (no 5 s reuse; the first
  scrape of a process reads the last day of events once, shown apart);
- ``GET /v1/reports/fairness?window_s=86400`` and ``GET /ui/fairness``;
- ``GET /v1/reports/utilization`` and ``GET /ui``;
- ``GET /v1/queue?limit=50`` with ``--queue-pending`` (20,000) jobs waiting (the
  extra ones arrive through the batch endpoint and are removed afterwards).

Before each timed call (not timed) the history moves on as a live server's
does: 20 new jobs, 5 s of virtual time and one dispatcher pass, so a call
that keeps state between calls has something new to read.

Baselines in the same run, interleaved call by call with the timed requests:
what the previous implementation did per request, run in a process of its own
(in the server's process its objects slowed the server's later requests):
``build_snapshot`` with the whole queue (the old gauge source) and the
fairness report over every job ever submitted (``job_records`` without a
window, filtered in Python: the old report's cost), and the unpaged queue
query. Ratios are new / baseline. Prints the load average before and after.
``--database-url`` keeps the database (or reuses the history this script built
in it before: building 100,000 jobs takes 10-30 min on the shared machine).

    TEST_DATABASE_URL=postgresql+psycopg://postgres@127.0.0.1/test \\
        .venv/bin/python bench/obs.py [--jobs 100000] [--days 14] [--pending 3000]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import random
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import httpx  # noqa: E402
from sqlalchemy import text  # noqa: E402

from app.main import start_metrics_refresh  # noqa: E402
from app.reports.fairness import fairness_report  # noqa: E402
from app.reports.queries import job_records  # noqa: E402
from app.store.db import make_engine, make_session_factory  # noqa: E402
from app.store.snapshot import build_snapshot  # noqa: E402
from bench.history import AUTH, job_body, load, with_history  # noqa: E402

DAY = 86400.0


def p50(xs: list[float]) -> float:
    return statistics.median(xs)


def compare(label, fn, base_label, base_fn, target, *, repeat: int, before=None) -> None:
    """``base_fn`` runs in the baseline process and returns its own seconds; ``before``
    (not timed) changes the history before each call, as a live server's does."""
    new, old = [], []
    for _ in range(repeat):  # interleaved: the same noise for both
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        new.append(time.perf_counter() - t0)
        old.append(base_fn())
    tgt = f"< {target * 1000:.0f}" if target else ""
    print(
        f"| `{label}` | {p50(new) * 1000:.0f} | {tgt} | {base_label} "
        f"| {p50(old) * 1000:.0f} | {p50(new) / p50(old):.3f} |",
        flush=True,
    )


# What GET /v1/queue did before it was paged: every pending job, in order, in one answer.
OLD_QUEUE = text(
    """
    SELECT j.* FROM jobs AS j
    LEFT JOIN (SELECT u.id, u.ord FROM queue_order AS q,
               unnest(q.job_ids) WITH ORDINALITY AS u(id, ord) WHERE q.id = 1) AS r
        ON r.id = j.id
    WHERE j.status = 'pending'
    ORDER BY r.ord ASC NULLS LAST, j.submitted_at, j.id
    """
)


# The baselines run in a process of their own: run in the server's process, the old
# paths' hundred thousand objects (and the per-process cache of ended jobs a report over
# all jobs fills) made every later request of the server pay for a larger heap.
_engine = None


def _baseline(kind: str, database_url: str, now: datetime) -> float:
    """One call of the old implementation, in the baseline process; its seconds."""
    global _engine
    if _engine is None:
        _engine = make_engine(database_url)
    sf = make_session_factory(_engine)
    t0 = time.perf_counter()
    with sf() as s:
        if kind == "snapshot":
            build_snapshot(s, now)
        elif kind == "fairness":
            fairness_report(job_records(s, now, None), now=now.timestamp(), window_s=DAY)
        else:
            s.execute(OLD_QUEUE).all()
    return time.perf_counter() - t0


class Baselines:
    """The old implementations, called one at a time in a child process."""

    def __init__(self, database_url: str) -> None:
        self.url = database_url
        self.pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))

    def call(self, kind: str, now: datetime) -> float:
        return self.pool.submit(_baseline, kind, self.url, now).result()

    def close(self) -> None:
        self.pool.shutdown()


def queue_case(live, c: httpx.Client, pending: int, repeat: int, base: Baselines) -> None:
    """The first page of the queue with ``pending`` jobs waiting (more are submitted
    for it through the batch endpoint, ranked by one dispatcher pass, removed after)."""
    sf = live.services.session_factory
    with sf() as s:
        before = s.scalar(text("SELECT max(id) FROM jobs"))
        now_pending = s.scalar(text("SELECT count(*) FROM jobs WHERE status = 'pending'"))
    rng = random.Random(7)
    left, i = max(0, pending - now_pending), 0
    while left > 0:
        k = min(500, left)
        body = [job_body(rng, 10_000_000 + i + j) for j in range(k)]
        c.post("/v1/jobs:batch", json={"jobs": body}).raise_for_status()
        left, i = left - k, i + k
    live.clock.advance(1)
    live.dispatcher.run_once()  # ranks the queue
    with live.services.engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("ANALYZE jobs"))
    with sf() as s:
        waiting = s.scalar(text("SELECT count(*) FROM jobs WHERE status = 'pending'"))

    try:
        compare(f"GET /v1/queue?limit=50 ({waiting:,} pending)",
                lambda: c.get("/v1/queue", params={"limit": 50}).raise_for_status(),
                "the unpaged queue query (old)", lambda: base.call("queue", live.clock()),
                0.050, repeat=repeat)
    finally:  # leave the history as it was built (the database may be reused)
        with sf() as s:
            s.execute(text("DELETE FROM jobs WHERE id > :b"), {"b": before})
            s.commit()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--days", type=float, default=14.0)
    ap.add_argument("--pending", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--queue-pending", type=int, default=20_000,
                    help="pending jobs for the /v1/queue first-page case")
    ap.add_argument("--database-url", default=None,
                    help="build into (or reuse the history of) this database and keep it")
    args = ap.parse_args()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}; {load()}"
    )
    with with_history(
        args.jobs, days=args.days, pending=args.pending, database_url=args.database_url
    ) as live:
        sf = live.services.session_factory
        with sf() as s:
            by_status = text("SELECT status, count(*) FROM jobs GROUP BY status")
            counts = dict(s.execute(by_status).all())
            day_jobs = len(job_records(s, live.clock(), DAY))
        print(
            f"history: {live.jobs:,} jobs over {args.days:g} days built in {live.build_s:.0f} s "
            f"through POST /v1/jobs:batch; by status {counts}; {day_jobs:,} in the last day"
        )
        with httpx.Client(base_url=live.url, headers=AUTH, timeout=120) as c:
            t0 = time.perf_counter()
            c.get("/metrics").raise_for_status()
            first_scrape = time.perf_counter() - t0
            # every scrape recomputes (the server otherwise reuses a pass for 5 s)
            live.app.state.metrics_max_age_s = 0.0

            base = Baselines(live.database_url)
            rng = random.Random(11)
            churned = [0]

            def churn() -> None:
                """Between calls: 20 new jobs, 5 s of virtual time, one dispatcher pass
                (admissions, finishes), so every call has something new to read."""
                body = [job_body(rng, 20_000_000 + churned[0] + k) for k in range(20)]
                churned[0] += 20
                c.post("/v1/jobs:batch", json={"jobs": body}).raise_for_status()
                live.clock.advance(5)
                live.dispatcher.run_once()

            def snapshot() -> float:
                return base.call("snapshot", live.clock())

            def full_report() -> float:
                return base.call("fairness", live.clock())

            def get(path: str, **params) -> None:
                c.get(path, params=params).raise_for_status()

            cases = [
                ("GET /metrics", lambda: get("/metrics"), "build_snapshot (old gauge source)",
                 snapshot, 0.100),
                ("GET /v1/reports/fairness?window_s=86400",
                 lambda: get("/v1/reports/fairness", window_s=DAY),
                 "fairness over all jobs (old cost)", full_report, 0.300),
                ("GET /ui/fairness", lambda: get("/ui/fairness"),
                 "fairness over all jobs (old cost)", full_report, 0.300),
                ("GET /v1/reports/utilization", lambda: get("/v1/reports/utilization"),
                 "build_snapshot (old source)", snapshot, None),
                ("GET /ui", lambda: get("/ui"), "build_snapshot (old source)", snapshot, None),
            ]
            print()
            print("| request | P50 ms | target | baseline | baseline P50 ms | ratio |")
            print("|---|---:|---:|---|---:|---:|")
            print(f"| first `GET /metrics` of a process (reads 1 day of events) "
                  f"| {first_scrape * 1000:.0f} | | | | |")
            try:
                for case in cases:
                    compare(*case, repeat=args.repeat, before=churn)
                # what a Prometheus scrape waits for in a running gpuq: the app's own
                # refresher makes the pass every GPUQ_METRICS_REFRESH_S (default 2.5 s)
                live.app.state.metrics_max_age_s = 5.0
                refresher = start_metrics_refresh(live.app, 2.5)
                try:
                    compare("GET /metrics, refreshed in the background every 2.5 s",
                            lambda: get("/metrics"), "build_snapshot (old gauge source)",
                            snapshot, 0.100, repeat=args.repeat, before=churn)
                finally:
                    if refresher is not None:
                        refresher.stop_and_wait()
                queue_case(live, c, args.queue_pending, args.repeat, base)
            finally:
                base.close()
    print(f"\n{load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
