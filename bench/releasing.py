"""What holding a stopped job's capacity until its pods are gone costs a dispatcher pass.

One run, PostgreSQL (TEST_DATABASE_URL or embedded) and the simulated
cluster on a manual clock, the demo cluster scaled (``--nodes-scale``):

1. a backlog of ``--jobs`` long jobs is admitted and bound;
2. baseline: passes with nothing releasing (the release step is then one
   index probe);
3. ``--cancel`` of the running jobs are cancelled with a stop delay, so their
   allocation rows stay releasing; passes are measured again, and the release
   step alone (finalise + snapshot marking) is timed.

    .venv/bin/python bench/releasing.py [--jobs 2000] [--nodes-scale 10] [--cancel 500]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from sqlalchemy import func, select

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.clock import ManualClock  # noqa: E402
from app.cluster.simulated import SimulatedCluster  # noqa: E402
from app.dispatch.dispatcher import Dispatcher  # noqa: E402
from app.dispatch.releasing_view import cluster_view, hold_releasing_in_context
from app.domain.from_config import cluster_model  # noqa: E402
from app.domain.spec import JobSpec  # noqa: E402
from app.store.jobs import cancel_job, submit_jobs  # noqa: E402
from app.store.orm import AllocationRow, JobRow  # noqa: E402
from app.store.releasing_rows import any_releasing, finalise
from app.store.snapshot import build_snapshot  # noqa: E402
from bench.dispatch import database, fresh_db, scaled_config  # noqa: E402


def specs(n: int) -> list[JobSpec]:
    teams = ["nlp", "recsys", "research"]
    types = {"nlp": "a100-80g", "recsys": "rtx4090-24g", "research": "v100-16g"}
    return [
        JobSpec.model_validate({
            "name": f"j{i}", "team": teams[i % 3],
            "resources": {"gpus": 1, "gpu_types": [types[teams[i % 3]]]},
            "duration_estimate_s": 1_000_000,
        })
        for i in range(n)
    ]


def passes(d: Dispatcher, clock: ManualClock, k: int) -> list[float]:
    out = []
    for _ in range(k):
        t0 = time.perf_counter()
        d.run_once()
        out.append(time.perf_counter() - t0)
        clock.advance(1)
    return out


def release_step(sf, cluster, now) -> float:
    """The work the feature adds to one pass, timed on its own (the snapshot it
    marks is built beforehand, untimed)."""
    with sf() as s:
        ctx = build_snapshot(s, now)
        t0 = time.perf_counter()
        any_releasing(s)
        finalise(s, cluster_view(cluster))
        hold_releasing_in_context(s, ctx)
        took = time.perf_counter() - t0
        s.rollback()  # measure only: keep the rows releasing
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--nodes-scale", type=int, default=10)
    ap.add_argument("--cancel", type=int, default=500)
    ap.add_argument("--passes", type=int, default=10)
    a = ap.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}")
    cfg = scaled_config(a.nodes_scale)
    with database() as url:
        engine, sf = fresh_db(url, cfg)
        clock = ManualClock()
        with sf() as s:
            submit_jobs(s, specs(a.jobs), now=clock())
            s.commit()
        cluster = SimulatedCluster(nodes=cluster_model(cfg).nodes, clock=clock,
                                   stop_delay_s=1e9)
        d = Dispatcher(sf, cluster, clock=clock)
        for _ in range(50):
            d.run_once()
            with sf() as s:
                pending = s.scalar(select(func.count()).select_from(JobRow)
                                   .where(JobRow.status == "pending"))
            if pending == 0:
                break
        with sf() as s:
            running = s.scalar(select(func.count()).select_from(JobRow)
                               .where(JobRow.status == "running"))
        print(f"nodes: {len(cluster.nodes)}, jobs running: {running}")
        base = passes(d, clock, a.passes)
        step0 = [release_step(sf, cluster, clock()) for _ in range(a.passes)]
        with sf() as s:
            ids = list(s.scalars(select(JobRow).where(JobRow.status == "running")
                                 .order_by(JobRow.id).limit(a.cancel)))
            for j in ids:
                cancel_job(s, j, now=clock(), by="bench")
            s.commit()
        d.run_once()  # stops them; with the delay their rows stay releasing
        with sf() as s:
            rel = s.scalar(select(func.count()).select_from(AllocationRow)
                           .where(AllocationRow.releasing_since.is_not(None)))
        held = passes(d, clock, a.passes)
        step = [release_step(sf, cluster, clock()) for _ in range(a.passes)]
        print(f"pass, nothing releasing (baseline): median {statistics.median(base) * 1e3:.1f} ms")
        print(f"pass, {rel} rows releasing:          median {statistics.median(held) * 1e3:.1f} ms")
        print(f"release step alone at 0 rows: median {statistics.median(step0) * 1e3:.2f} ms")
        print(f"release step alone at {rel} rows (finalise + read and mark on the snapshot): "
              f"median {statistics.median(step) * 1e3:.1f} ms")
        engine.dispose()


if __name__ == "__main__":
    main()
