"""A flooded queue: one team sends 200,000 jobs; how long does another team's job wait?

Without limits one team sent 200,000 jobs in 45 s (40 batches of 5,000, all
accepted); passes then took up to 100 s and another team's one-GPU job took 76 s
to start. This bench replays that attack in one process, twice on fresh databases
in the same run:

- ``old``: no caps (``GPUQ_TEAM_MAX_PENDING=0``, ``GPUQ_TEAM_SUBMIT_RATE=0``, what
  the service did before the limits);
- ``new``: the shipped defaults (10,000 pending per team, 100 jobs/s with bursts
  of 5,000). The attacker sends the same 40 batches back to back, then keeps
  going, honouring ``Retry-After``, until it holds the cap, so the new case is
  measured at the worst queue the limits allow, not at the first refusal.

Both use the demo config, the simulated cluster, the real dispatcher looping in a
thread (a pass every second, or back to back when one takes longer) and the API
in process (team tokens). The flood asks for one A100 each (team nlp: a few
start, the rest wait on its quota); then team recsys submits one job for an idle
RTX 4090, and the bench measures the seconds from its 201 to its admission, the
passes in that time, and a few reads. Prints the machine and its load average.

    .venv/bin/python bench/flood.py [--jobs 200000] [--batch 5000]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fastapi.testclient import TestClient  # noqa: E402
from sqlalchemy import select  # noqa: E402

from app.clock import ManualClock  # noqa: E402
from app.cluster.simulated import SimulatedCluster  # noqa: E402
from app.dispatch.dispatcher import Dispatcher  # noqa: E402
from app.domain.from_config import cluster_model  # noqa: E402
from app.domain.percentiles import percentile  # noqa: E402
from app.main import create_app  # noqa: E402
from app.runtime import Services  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.store.orm import JobRow  # noqa: E402
from bench.api_jobs import nlp_job, team_token  # noqa: E402
from bench.dispatch import database, fresh_db, scaled_config  # noqa: E402
from bench.history import load  # noqa: E402

ADMIN = "bench-flood-admin-token-0123456789abcdef"
CASES = {
    "old (no caps)": {"GPUQ_TEAM_MAX_PENDING": 0, "GPUQ_TEAM_SUBMIT_RATE": 0},
    "new (defaults)": {},
}


class Loop:
    """The dispatcher as ``gpuq serve`` runs it: a pass, then the rest of the interval."""

    def __init__(self, d: Dispatcher, clock: ManualClock, sf, interval: float = 1.0) -> None:
        self.d, self.clock, self.sf, self.interval = d, clock, sf, interval
        self.passes: list[float] = []
        self.watch: int | None = None
        self.admitted_at: float | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            t0 = time.perf_counter()
            self.d.run_once()
            took = time.perf_counter() - t0
            self.passes.append(took)
            self.clock.advance(max(took, self.interval))
            if self.watch is not None and self.admitted_at is None:
                with self.sf() as s:
                    at = s.scalar(select(JobRow.admitted_at).where(JobRow.id == self.watch))
                if at is not None:
                    self.admitted_at = time.perf_counter()
            self.stop.wait(max(0.0, self.interval - took))


def flood(c: TestClient, h: dict, n: int, batch: int, patient: bool) -> dict:
    """40 batches back to back (the attack); then, if ``patient``, on until a 429 that
    names the pending cap, waiting what Retry-After says."""
    body = {"jobs": [nlp_job(f"f{i}", 3600) for i in range(batch)]}
    codes: dict[int, int] = {}
    accepted = 0
    t0 = time.perf_counter()
    for _ in range(n // batch):
        r = c.post("/v1/jobs:batch", json=body, headers=h)
        codes[r.status_code] = codes.get(r.status_code, 0) + 1
        accepted += batch if r.status_code == 201 else 0
    attack_s = time.perf_counter() - t0
    while patient:
        r = c.post("/v1/jobs:batch", json={"jobs": body["jobs"][:500]}, headers=h)
        codes[r.status_code] = codes.get(r.status_code, 0) + 1
        if r.status_code == 201:
            accepted += 500
        elif "max_pending" in r.json().get("detail", ""):
            break
        else:
            time.sleep(float(r.headers.get("Retry-After", "1")))
    return {"accepted": accepted, "codes": codes, "attack_s": attack_s,
            "fill_s": time.perf_counter() - t0}


def timed_get(c: TestClient, path: str, h: dict) -> str:
    """Seconds to answer, with the status when it is not a 200 (a 503 is the request
    budget, GPUQ_REQUEST_TIMEOUT, running out)."""
    t0 = time.perf_counter()
    r = c.get(path, headers=h)
    took = f"{time.perf_counter() - t0:.2f}"
    return took if r.status_code == 200 else f"{took} ({r.status_code})"


def run_case(name: str, env: dict, jobs: int, batch: int) -> dict:
    with database() as url:
        cfg = scaled_config(1)
        engine, sf = fresh_db(url, cfg)
        clock = ManualClock()
        settings = Settings(DATABASE_URL=url, GPUQ_ADMIN_TOKEN=ADMIN, GPUQ_RUN_LOOPS=False,
                            GPUQ_MAX_BODY_BYTES=10_000_000, **env)
        cluster = SimulatedCluster(nodes=cluster_model(cfg).nodes, clock=clock)
        services = Services(settings=settings, engine=engine, session_factory=sf,
                            cluster=cluster, clock=clock, admin_token=ADMIN)
        loop = Loop(Dispatcher(sf, cluster, clock=clock), clock, sf)
        admin = {"Authorization": f"Bearer {ADMIN}"}
        try:
            with TestClient(create_app(services=services)) as c:
                tok = {t: {"Authorization": "Bearer " + team_token(c, t, admin)}
                       for t in ("nlp", "recsys")}
                loop.thread.start()
                f = flood(c, tok["nlp"], jobs, batch, patient=not env)
                with sf() as s:
                    pending = s.query(JobRow).filter(JobRow.team == "nlp",
                                                     JobRow.status == "pending").count()
                during = list(loop.passes)
                mark = len(loop.passes)
                r = c.post("/v1/jobs", headers=tok["recsys"], json={
                    "name": "probe", "team": "recsys", "duration_estimate_s": 60,
                    "resources": {"gpus": 1, "gpu_types": ["rtx4090-24g"]}})
                r.raise_for_status()
                t0 = time.perf_counter()
                loop.watch = int(r.json()["id"])
                while loop.admitted_at is None and time.perf_counter() - t0 < 1800:
                    time.sleep(0.05)
                start_s = (loop.admitted_at or float("nan")) - t0
                after = loop.passes[mark:]
                reads = {p: timed_get(c, p, h) for p, h in (
                    ("/v1/reports/fairness", admin), ("/v1/queue?limit=50", tok["recsys"]),
                    ("/ui/teams", admin))}
        finally:
            loop.stop.set()
            loop.thread.join(timeout=600)
            engine.dispose()
    return {"name": name, "flood": f, "pending": pending, "start_s": start_s,
            "passes_during": during, "passes_after": after, "reads": reads,
            "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=200_000, help="jobs the attacker sends")
    ap.add_argument("--batch", type=int, default=5_000, help="jobs per request")
    args = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}; before: {load()}")
    print(f"attack: {args.jobs:,} jobs of team nlp in batches of {args.batch:,}; probe: one "
          "recsys job for an idle RTX 4090\n")
    print("| case | nlp jobs accepted | answers | nlp pending | probe start s | passes until "
          "it | pass s P50 / max (flood) | pass s max (probe) | fairness report s | "
          "queue s | /ui/teams s | peak RSS MB |")
    print("|---|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    # new first: the peak RSS of the process is then each case's own
    for name in sorted(CASES, key=lambda k: k.startswith("old")):
        res = run_case(name, CASES[name], args.jobs, args.batch)
        f = res["flood"]
        codes = ", ".join(f"{k}: {v}" for k, v in sorted(f["codes"].items()))
        during, after = res["passes_during"] or [0.0], res["passes_after"] or [0.0]
        rd = res["reads"]
        print(f"| {name} | {f['accepted']:,} | {codes} | {res['pending']:,} "
              f"| {res['start_s']:.2f} | {len(res['passes_after'])} "
              f"| {percentile(during, 50) or 0:.2f} / {max(during):.2f} | {max(after):.2f} "
              f"| {rd['/v1/reports/fairness']} | {rd['/v1/queue?limit=50']} "
              f"| {rd['/ui/teams']} | {res['rss_mb']:,.0f} |", flush=True)
    print(f"\nafter: {load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
