"""Dispatcher throughput: submit -> bound with PostgreSQL and the simulated cluster.

Prints, for N jobs on a scaled demo cluster: submit rate (one transaction per
job, as the API does), dispatcher passes until every job is bound, and the
time of one pass split into the pure core (the baseline, measured on the same
snapshot in the same run) and everything around it (snapshot, writes,
cluster calls). Uses TEST_DATABASE_URL (its own database, dropped at the end)
or an embedded PostgreSQL.

    .venv/bin/python bench/dispatch.py [--jobs 2000] [--nodes-scale 10]
"""

from __future__ import annotations

import argparse
import os
import platform
import secrets
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

from app.clock import ManualClock
from app.cluster.simulated import SimulatedCluster
from app.domain.config import load_config_text
from app.domain.spec import JobSpec
from app.loops.dispatcher import Dispatcher
from app.loops.snapshot import build_snapshot
from app.runtime import demo_config_text
from app.scheduling.from_config import cluster_model
from app.scheduling.policies import get_policy
from app.store import migrate
from app.store.config_loader import apply_config
from app.store.db import make_engine, make_session_factory, normalize_url, psycopg_conninfo
from app.store.jobs import submit_job


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--nodes-scale", type=int, default=10)
    args = ap.parse_args()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    cfg = scaled_config(args.nodes_scale)
    with database() as url:
        engine = make_engine(url)
        migrate.upgrade(engine)
        sf = make_session_factory(engine)
        with sf() as s:
            apply_config(s, cfg)
            s.commit()
        clock = ManualClock()
        teams = ["nlp", "recsys", "research"]
        types = {"nlp": "a100-80g", "recsys": "rtx4090-24g", "research": "v100-16g"}
        specs = [
            JobSpec.model_validate(
                {
                    "name": f"j{i}",
                    "team": teams[i % 3],
                    "resources": {"gpus": 1 + i % 2, "gpu_types": [types[teams[i % 3]]]},
                    "duration_estimate_s": 3600,
                }
            )
            for i in range(args.jobs)
        ]
        t0 = time.perf_counter()
        for spec in specs:
            with sf() as s:
                submit_job(s, spec, now=clock())
                s.commit()
        submit_s = time.perf_counter() - t0

        with sf() as s:
            snap = build_snapshot(s, clock()).snapshot
        t0 = time.perf_counter()
        core = get_policy("gpuq")(snap)
        core_s = time.perf_counter() - t0

        nodes = cluster_model(cfg).nodes
        cluster = SimulatedCluster(nodes=nodes, clock=clock)
        d = Dispatcher(sf, cluster, clock=clock)
        passes, t0 = 0, time.perf_counter()
        first_pass_s = None
        while True:
            tp = time.perf_counter()
            d.run_once()
            passes += 1
            if first_pass_s is None:
                first_pass_s = time.perf_counter() - tp
            bound = len(cluster.running_job_ids())
            if bound == len(core.admissions) or passes >= 20:
                break
        dispatch_s = time.perf_counter() - t0
        gpus = sum(len(n.devices) for n in nodes)
        print(f"cluster: {len(nodes)} nodes, {gpus} GPUs; jobs submitted: {args.jobs}")
        print(f"submit: {args.jobs / submit_s:,.0f} jobs/s (one transaction each)")
        print(
            f"core alone on the full backlog (baseline): {core_s * 1000:,.0f} ms, "
            f"{len(core.admissions)} admissions"
        )
        print(
            f"first dispatcher pass (snapshot + core + writes + binds): "
            f"{first_pass_s * 1000:,.0f} ms"
        )
        print(
            f"bound {bound} jobs in {passes} pass(es), {dispatch_s:.2f} s: "
            f"{bound / dispatch_s:,.0f} jobs/s submit->bound (excluding submit)"
        )
        engine.dispose()


if __name__ == "__main__":
    main()
