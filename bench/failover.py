"""What a failover costs: seconds from the leader's death to a new job's Pod bound.

Two dispatcher replicas (``gpuq serve``'s loop, ``GPUQ_DISPATCH_INTERVAL`` 1 s) on the
fake API server (tests/fakekube) and a PostgreSQL database of their own, one leading.
Each round the leader dies the way a killed process does (its database session ends, so
PostgreSQL frees the lock at once; its loop and watches stop) and a one-GPU job is
submitted at the same instant; the figure is the time until the standby has bound that
job's Pod (it must first notice it leads, reconcile every Pod, then plan and bind). A
graceful stop (SIGTERM: the leader releases the lock) is timed the same way.

``--blackhole``: the leader's session runs through a TCP proxy that goes silent without a
FIN or an RST (tests/tcp_proxy.py: the proxy's kernel still acknowledges, so no TCP
timer fires on either side) while the leader keeps re-checking its lock; the figures are
the seconds until the old leader stopped acting (its check got no answer within
``check_timeout_s``) and until the standby led (PostgreSQL ended the silent session after
the lease, ``idle_session_timeout``), for the defaults (lease 60 s, check 10 s) and for
small settings (lease 3 s, check 1 s). A host lost without a FIN on a direct path is
noticed sooner, by PostgreSQL's keepalives: 10 s idle + 3 probes x 5 s = 25 s.

    TEST_DATABASE_URL=... nice -n 10 .venv/bin/python -m bench.failover --rounds 5
    TEST_DATABASE_URL=... nice -n 10 .venv/bin/python -m bench.failover --blackhole --rounds 3
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import threading
import time
import uuid

import psycopg
from sqlalchemy.orm import sessionmaker

from app.clock import utcnow
from app.dispatch.dispatcher import Dispatcher
from app.dispatch.leader import CHECK_TIMEOUT_S, SESSION_OPTIONS, libpq_dsn, session_options
from app.domain.spec import JobSpec
from app.store.db import make_engine, make_session_factory
from app.store.jobs import submit_job
from tests.fakekube.db import A100_TRAINING_CONFIG, fresh_database
from tests.fakekube.fixtures import elector, started_cluster
from tests.fakekube.objects import article_a100
from tests.fakekube.server import FakeKube
from tests.tcp_proxy import leader_blackhole_round


class Replica:
    """One dispatcher process: its cluster watch and its loop thread."""

    def __init__(self, kube: FakeKube, sf: sessionmaker, url: str, lock: str) -> None:
        self.cluster = started_cluster(kube, sf)
        self.d = Dispatcher(sf, self.cluster, elector=elector(url, lock), interval=1.0)
        self.thread = threading.Thread(target=self.d.start, daemon=True)
        self.thread.start()

    def kill(self, url: str) -> None:
        """Like SIGKILL: the session ends (the kernel closes its sockets), nothing runs."""
        with psycopg.connect(libpq_dsn(url), autocommit=True) as c:
            c.execute("SELECT pg_terminate_backend(%s, 10000)", (self.d.elector.backend_pid,))
        self.d.stop()
        self.cluster.close()

    def terminate(self) -> None:
        """Like SIGTERM: the pass ends, the lock is released (Dispatcher.start)."""
        self.d.stop()
        self.thread.join(10)
        self.cluster.close()


def _bound(kube: FakeKube, job_id: int) -> bool:
    return any(p["metadata"]["labels"].get("gpuq.io/job-id") == str(job_id)
               and p["spec"].get("nodeName") for p in kube.gpuq_pods())


def blackhole(rounds: int) -> None:
    """The ``--blackhole`` figures (see the module docstring)."""
    print(f"machine: {os.cpu_count()} cores, {platform.machine()}, load average "
          f"{os.getloadavg()[0]:.1f}; leader behind a proxy that goes silent")
    settings = {
        "defaults (lease 60 s, check 10 s)": (SESSION_OPTIONS, CHECK_TIMEOUT_S),
        "small (lease 3 s, check 1 s)": (session_options(1, 1, 2, 2, 3), 1.0),
    }
    for url in fresh_database(A100_TRAINING_CONFIG):
        for name, (options, check) in settings.items():
            stops, takes = [], []
            for _ in range(rounds):
                stopped, taken = leader_blackhole_round(url, options, check, timeout_s=180)
                assert stopped is not None and taken is not None and stopped <= taken
                stops.append(stopped)
                takes.append(taken)
            print(f"{name}: rounds {rounds}; old leader stopped acting: median "
                  f"{statistics.median(stops):.2f} s, max {max(stops):.2f} s; standby led: "
                  f"median {statistics.median(takes):.2f} s, max {max(takes):.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--blackhole", action="store_true",
                    help="the leader's path goes silent without a FIN (see above)")
    args = ap.parse_args()
    if args.blackhole:
        blackhole(args.rounds)
        return
    kube = FakeKube(watch_timeout_s=30)
    kube.start()
    for i in range(4):
        kube.add_node(article_a100(f"a100-{i}"))
    print(f"machine: {os.cpu_count()} cores, {platform.machine()}, load average "
          f"{os.getloadavg()[0]:.1f}; two replicas, dispatch interval 1 s")
    for url in fresh_database(A100_TRAINING_CONFIG):
        engine = make_engine(url, pool_size=6)
        sf = make_session_factory(engine)
        lock = f"gpuq-{uuid.uuid4().hex[:8]}"
        replicas = [Replica(kube, sf, url, lock), Replica(kube, sf, url, lock)]
        figures: dict[str, list[float]] = {"kill": [], "terminate": []}
        try:
            for r in range(2 * args.rounds):
                how = "kill" if r % 2 == 0 else "terminate"
                while not any(x.d.elector.is_leader for x in replicas):
                    time.sleep(0.05)
                i = next(k for k, x in enumerate(replicas) if x.d.elector.is_leader)
                time.sleep(1.5)  # a quiet moment: the standby in its steady state
                with sf() as s:
                    spec = JobSpec.model_validate({
                        "name": f"f{r}", "team": "nlp", "duration_estimate_s": 3600,
                        "resources": {"gpus": 1, "gpu_types": ["a100-80g"], "cpu": 1,
                                      "memory_gb": 1}})
                    job_id = submit_job(s, spec, now=utcnow()).job.id
                    t0 = time.monotonic()
                    if how == "kill":
                        replicas[i].kill(url)
                    else:
                        replicas[i].terminate()
                    s.commit()
                while not _bound(kube, job_id):
                    time.sleep(0.02)
                figures[how].append(time.monotonic() - t0)
                replicas[i] = Replica(kube, sf, url, lock)  # the Deployment restarts it
        finally:
            for x in replicas:
                x.terminate()
            engine.dispose()
    kube.stop()
    for how, xs in figures.items():
        print(f"{how:<10} rounds {len(xs)}: median {statistics.median(xs):.2f} s, "
              f"max {max(xs):.2f} s (leader gone -> new job's Pod bound by the standby)")


if __name__ == "__main__":
    main()
