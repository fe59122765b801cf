"""Dispatcher throughput: submit -> bound with PostgreSQL and the simulated cluster.

Prints, in one run, with the machine and its load average:

- submit rates: over HTTP (a real uvicorn server, one job per request and
  POST /v1/jobs:batch), and direct through the store (one transaction per
  job, and batches);
- end to end, for each backlog size (default 5,000 and 20,000 jobs): the
  jobs are submitted in batches, then the dispatcher runs passes back to
  back (the simulated cluster's manual clock moves 1 s per pass, the
  dispatch interval, and jobs run 1 s, so each pass frees what the previous
  one bound) until every job has been bound; jobs/s is
  backlog / (submit + dispatch time). Both dispatcher paths run on the same
  database size: ``incremental`` (the dispatcher's in-memory picture) and
  ``full-reload`` as the baseline (:class:`FullReloadPicture`, kept here and
  nowhere in the service: every live job re-read through the ORM each pass;
  the writes are the dispatcher's own);
- the split of the passes: snapshot / core / write / perform (ingest and
  reconcile are counted in perform).

Uses TEST_DATABASE_URL (its own databases, dropped at the end) or an
embedded PostgreSQL.

    .venv/bin/python bench/dispatch.py [--jobs 5000 20000] [--nodes-scale 10]
"""

from __future__ import annotations

import argparse
import os
import platform
import secrets
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import psycopg
from psycopg import sql
from sqlalchemy import func, select
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from app.clock import ManualClock
from app.cluster.simulated import SimulatedCluster
from app.dispatch.dispatcher import Dispatcher
from app.dispatch.picture import QueuePicture
from app.domain.config import load_config_text
from app.domain.from_config import cluster_model
from app.domain.spec import JobSpec
from app.runtime import demo_config_text
from app.store import migrate
from app.store.config_loader import apply_config
from app.store.db import make_engine, make_session_factory, normalize_url, psycopg_conninfo
from app.store.jobs import submit_job, submit_jobs
from app.store.orm import JobRow
from app.store.snapshot import SnapshotContext, build_snapshot

BENCH_ADMIN_TOKEN = "bench-admin-token-0123456789abcdefghijkl"


@contextmanager
def database():
    name = f"gpuq_bench_{os.getpid()}_{secrets.token_hex(3)}"
    base = os.environ.get("TEST_DATABASE_URL")
    if base:
        u = make_url(normalize_url(base))
        admin = psycopg_conninfo(u.render_as_string(hide_password=False))
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        try:
            yield u.set(database=name).render_as_string(hide_password=False)
        finally:
            with psycopg.connect(admin, autocommit=True) as c:
                c.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
    else:
        from app.store.embedded import start_embedded

        tmp = Path(tempfile.mkdtemp(prefix="gpuq-bench-"))
        emb = start_embedded(tmp, database=name, delete_on_stop=True)
        try:
            yield emb.url
        finally:
            emb.stop()
            shutil.rmtree(tmp, ignore_errors=True)


def scaled_config(scale: int):
    cfg = load_config_text(demo_config_text())
    nodes = []
    for n in cfg.nodes:
        nodes.append(n.model_copy(update={"count": (n.count or 1) * scale, "mig_layout": None}))
    teams = [t.model_copy(update={"quota_units": None}) for t in cfg.teams]
    return cfg.model_copy(update={"nodes": nodes, "teams": teams})


def job_specs(n: int, start: int = 0) -> list[JobSpec]:
    teams = ["nlp", "recsys", "research"]
    types = {"nlp": "a100-80g", "recsys": "rtx4090-24g", "research": "v100-16g"}
    return [
        JobSpec.model_validate(
            {
                "name": f"j{i}",
                "team": teams[i % 3],
                "resources": {"gpus": 1 + i % 2, "gpu_types": [types[teams[i % 3]]]},
                "duration_estimate_s": 1,
            }
        )
        for i in range(start, start + n)
    ]


def fresh_db(url: str, cfg):
    engine = make_engine(url)
    migrate.upgrade(engine)
    sf = make_session_factory(engine)
    with sf() as s:
        apply_config(s, cfg)
        s.commit()
    return engine, sf


def clear_jobs(engine) -> None:
    with engine.begin() as c:
        c.exec_driver_sql("TRUNCATE jobs, allocations, leases, job_events")


def submit_direct(sf, clock, specs: list[JobSpec], batch: int) -> float:
    """Seconds to submit ``specs`` through the store (batch 1 = one transaction each)."""
    t0 = time.perf_counter()
    if batch == 1:
        for spec in specs:
            with sf() as s:
                submit_job(s, spec, now=clock())
                s.commit()
    else:
        for i in range(0, len(specs), batch):
            with sf() as s:
                submit_jobs(s, specs[i : i + batch], now=clock())
                s.commit()
    return time.perf_counter() - t0


def submit_http(url: str, n_single: int, n_batch: int) -> tuple[float, float]:
    """Jobs/s over HTTP to a real uvicorn server: one per request, then batches of 500."""
    import httpx
    import uvicorn

    from app.main import create_app
    from app.runtime import open_services
    from app.settings import Settings

    settings = Settings(database_url=url, admin_token=BENCH_ADMIN_TOKEN)
    services = open_services(settings, with_loops=False, apply_file_config=False)
    server = uvicorn.Server(
        uvicorn.Config(create_app(services=services), port=0, log_level="warning")
    )
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    while not server.started:
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    h = {"Authorization": f"Bearer {BENCH_ADMIN_TOKEN}"}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=h) as c:
            # what each spec was given: a dump of every field sends the scenario-only `speed`
            # ({}), which the service refuses (422)
            bodies = [s.model_dump(mode="json", exclude_unset=True) for s in job_specs(n_single)]
            t0 = time.perf_counter()
            for b in bodies:
                c.post("/v1/jobs", json=b).raise_for_status()
            single = n_single / (time.perf_counter() - t0)
            bodies = [s.model_dump(mode="json", exclude_unset=True) for s in job_specs(n_batch)]
            t0 = time.perf_counter()
            for i in range(0, n_batch, 500):
                c.post("/v1/jobs:batch", json={"jobs": bodies[i : i + 500]}).raise_for_status()
            batched = n_batch / (time.perf_counter() - t0)
    finally:
        server.should_exit = True
        th.join(timeout=10)
        services.close()
    return single, batched


class FullReloadPicture(QueuePicture):
    """The baseline: the snapshot rebuilt from every live job each pass
    (:func:`~app.store.snapshot.build_snapshot`), not from the rows changed
    since the last one."""

    def refresh(self, session: Session, now: datetime) -> SnapshotContext:
        return build_snapshot(session, now)


def end_to_end(sf, cfg, n: int, incremental: bool, max_passes: int, step_s: float) -> dict:
    clock = ManualClock()
    specs = job_specs(n)
    submit_s = submit_direct(sf, clock, specs, batch=1000)
    nodes = cluster_model(cfg).nodes
    cluster = SimulatedCluster(nodes=nodes, clock=clock)
    d = Dispatcher(sf, cluster, clock=clock, picture=None if incremental else FullReloadPicture())
    split = {"snapshot": 0.0, "core": 0.0, "write": 0.0, "perform": 0.0}
    passes, dispatch_s = 0, 0.0
    bound = 0
    while bound < n and passes < max_passes:
        tp = time.perf_counter()
        d.run_once()
        dispatch_s += time.perf_counter() - tp
        passes += 1
        for k in split:
            split[k] += d.timings.get(k, 0.0)
        split["perform"] += d.timings.get("ingest", 0.0)
        with sf() as s:  # not timed: how many jobs were ever admitted
            bound = s.scalar(
                select(func.count()).select_from(JobRow).where(JobRow.admitted_at.is_not(None))
            )
        clock.advance(step_s)
    return {
        "submit_s": submit_s,
        "dispatch_s": dispatch_s,
        "passes": passes,
        "bound": bound,
        "split": split,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, nargs="+", default=[5000, 20000])
    ap.add_argument("--nodes-scale", type=int, default=10)
    ap.add_argument("--http-jobs", type=int, default=300, help="jobs for the HTTP submit rate")
    ap.add_argument("--max-passes", type=int, default=400)
    ap.add_argument(
        "--step-s",
        type=float,
        default=1.0,
        help="cluster seconds per pass (the dispatch interval; jobs run 1 s)",
    )
    ap.add_argument(
        "--baseline-max-jobs",
        type=int,
        default=5000,
        help="skip the full-reload baseline above this backlog",
    )
    args = ap.parse_args()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
        f", load average at start {os.getloadavg()[0]:.2f}"
    )
    cfg = scaled_config(args.nodes_scale)
    nodes = cluster_model(cfg).nodes
    gpus = sum(len(n.devices) for n in nodes)
    print(f"cluster: {len(nodes)} nodes, {gpus} GPUs (demo config x {args.nodes_scale})")
    with database() as url:
        engine, sf = fresh_db(url, cfg)
        clock = ManualClock()
        n = args.http_jobs
        one = submit_direct(sf, clock, job_specs(n), batch=1)
        many = submit_direct(sf, clock, job_specs(10 * n), batch=500)
        print(
            f"submit direct: {n / one:,.0f} jobs/s one transaction each; "
            f"{10 * n / many:,.0f} jobs/s in batches of 500"
        )
        clear_jobs(engine)
        single, batched = submit_http(url, n, 10 * n)
        print(
            f"submit HTTP: {single:,.0f} jobs/s POST /v1/jobs; "
            f"{batched:,.0f} jobs/s POST /v1/jobs:batch (500 per request)"
        )
        print()
        print(
            "| backlog | path | submit s | dispatch s | passes | bound | submit->bound jobs/s "
            "| snapshot s | core s | write s | perform s | load avg |"
        )
        print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for jobs in args.jobs:
            for incremental in (True, False):
                if not incremental and jobs > args.baseline_max_jobs:
                    continue
                clear_jobs(engine)
                r = end_to_end(sf, cfg, jobs, incremental, args.max_passes, args.step_s)
                sp = r["split"]
                total = r["submit_s"] + r["dispatch_s"]
                print(
                    f"| {jobs:,} | {'incremental' if incremental else 'full-reload'} "
                    f"| {r['submit_s']:.2f} | {r['dispatch_s']:.2f} | {r['passes']} "
                    f"| {r['bound']:,} | {r['bound'] / total:,.0f} "
                    f"| {sp['snapshot']:.2f} | {sp['core']:.2f} | {sp['write']:.2f} "
                    f"| {sp['perform']:.2f} | {os.getloadavg()[0]:.2f} |",
                    flush=True,
                )
        engine.dispose()


if __name__ == "__main__":
    main()
