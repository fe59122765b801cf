"""A gpuq with weeks of job history, built the way a real one is: through the API.

Shared by the benchmarks that need a long history (``bench/obs.py``,
``bench/queue.py``). A real uvicorn server runs the app on a fresh database
(the demo cluster x ``scale``) with a manual clock; jobs arrive through
``POST /v1/jobs:batch`` in batches of 500 spread evenly over ``days`` of
virtual time, and between batches the real dispatcher and the simulated
cluster run them (passes every ``step_s`` virtual seconds): jobs of three
teams and three priorities, some preempted by P0 work, about 1 % cancelled
through ``POST /v1/jobs/{id}/cancel``. At the end ``pending`` more jobs are
submitted at once and one dispatcher pass ranks them (they wait behind a
cluster filled with long jobs), so the queue is as long as asked. Then
``VACUUM ANALYZE``, which autovacuum does on its own where it is on (the
shared development server runs with it off).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import timedelta

import httpx
import uvicorn
from fastapi import FastAPI
from sqlalchemy import text

from app.clock import ManualClock
from app.cluster.simulated import SimulatedCluster
from app.dispatch.dispatcher import Dispatcher
from app.domain.from_config import cluster_model
from app.main import create_app
from app.metrics import GpuqMetrics
from app.runtime import Services
from app.settings import Settings
from bench.dispatch import database, fresh_db, scaled_config

ADMIN = "bench-admin-token"
AUTH = {"Authorization": f"Bearer {ADMIN}"}
TEAMS = (("nlp", "a100-80g"), ("recsys", "rtx4090-24g"), ("research", "v100-16g"))
BATCH = 500


def job_body(rng: random.Random, i: int, *, duration: float | None = None) -> dict:
    team, gpu_type = TEAMS[i % 3]
    return {
        "name": f"h{i}",
        "team": team,
        "priority": rng.choices(("P0", "P1", "P2"), (1, 6, 3))[0],
        "resources": {"gpus": rng.choice((1, 1, 2, 4)), "gpu_types": [gpu_type]},
        "duration_estimate_s": duration or rng.choice((120, 600, 1800, 3600)),
    }


@dataclass
class Live:
    """A running server over a database with history."""

    url: str  # the server
    app: FastAPI
    database_url: str
    services: Services
    clock: ManualClock
    dispatcher: Dispatcher
    jobs: int
    build_s: float


@contextmanager
def serve(
    database_url: str, scale: int
) -> Iterator[tuple[str, FastAPI, Services, ManualClock, Dispatcher]]:
    cfg = scaled_config(scale)
    engine, sf = fresh_db(database_url, cfg)
    clock = ManualClock()
    cluster = SimulatedCluster(nodes=cluster_model(cfg).nodes, clock=clock)
    settings = Settings(DATABASE_URL=database_url, GPUQ_ADMIN_TOKEN=ADMIN, GPUQ_RUN_LOOPS=False)
    services = Services(
        settings=settings,
        engine=engine,
        session_factory=sf,
        cluster=cluster,
        clock=clock,
        admin_token=ADMIN,
        metrics=GpuqMetrics(),
    )
    app = create_app(settings, services)
    server = uvicorn.Server(uvicorn.Config(app, port=0, log_level="warning", access_log=False))
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    while not server.started:
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        url = f"http://127.0.0.1:{port}"
        yield url, app, services, clock, Dispatcher(sf, cluster, clock=clock)
    finally:
        server.should_exit = True
        th.join(timeout=10)
        engine.dispose()


@contextmanager
def with_history(
    jobs: int, *, days: float = 14.0, pending: int = 3000, scale: int = 10, step_s: float = 1800.0,
    seed: int = 42, progress: bool = True, database_url: str | None = None,
) -> Iterator[Live]:
    """``database_url``: a database to fill and keep, or one this function filled before,
    whose history is reused (default: a new database, dropped after)."""
    with ExitStack() as stack:
        db_url = database_url or stack.enter_context(database())
        yield stack.enter_context(
            _history(db_url, jobs, days, pending, scale, step_s, seed, progress)
        )


@contextmanager
def _history(
    db_url: str, jobs: int, days: float, pending: int, scale: int, step_s: float, seed: int,
    progress: bool,
) -> Iterator[Live]:
    t0 = time.perf_counter()
    rng = random.Random(seed)
    with serve(db_url, scale) as (url, app, services, clock, dispatcher):
        with services.session_factory() as s:
            built = s.scalar(text("SELECT count(*) FROM jobs"))
            last = s.scalar(text("SELECT max(at) FROM job_events"))
        if built:  # a database this function filled before (--database-url): reuse it
            clock.t = last + timedelta(seconds=1)
            yield Live(url, app, db_url, services, clock, dispatcher, built, 0.0)
            return
        batches = max(1, jobs // BATCH)
        gap_s = days * 86400.0 / batches
        with httpx.Client(base_url=url, headers=AUTH, timeout=120) as c:
            n = 0
            for b in range(batches):
                body = [job_body(rng, n + k) for k in range(BATCH)]
                r = c.post("/v1/jobs:batch", json={"jobs": body})
                r.raise_for_status()
                ids = [it["id"] for it in r.json()["items"]]
                n += BATCH
                for jid in rng.sample(ids, BATCH // 100):
                    c.post(f"/v1/jobs/{jid}/cancel")  # 409 when it already ended: fine
                passes = max(1, int(gap_s // step_s))
                for _ in range(passes):
                    dispatcher.run_once()
                    clock.advance(gap_s / passes)
                if progress and b % 20 == 0:
                    print(f"  history: {n:,} jobs, day {b * gap_s / 86400:.1f}", flush=True)
            # a cluster busy with long jobs, then the backlog behind it
            fill = [job_body(rng, n + k, duration=30 * 86400) for k in range(BATCH)]
            c.post("/v1/jobs:batch", json={"jobs": fill}).raise_for_status()
            dispatcher.run_once()
            left = pending
            while left > 0:
                k = min(BATCH, left)
                body = [job_body(rng, n + BATCH + pending - left + j) for j in range(k)]
                c.post("/v1/jobs:batch", json={"jobs": body}).raise_for_status()
                left -= k
            clock.advance(5)
            dispatcher.run_once()  # ranks the queue
        with services.engine.connect() as conn:  # what autovacuum would have done by now
            conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM ANALYZE"))
        yield Live(
            url=url,
            app=app,
            database_url=db_url,
            services=services,
            clock=clock,
            dispatcher=dispatcher,
            jobs=n + BATCH + pending,
            build_s=time.perf_counter() - t0,
        )


def load() -> str:
    return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
