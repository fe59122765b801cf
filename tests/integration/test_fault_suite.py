"""Fault-injection suite against the real PostgreSQL.

A stream of jobs (whole cards, MIG, shares, gangs, three priorities so
preemption happens, cancels) runs through the dispatcher and the simulated
cluster while faults are injected:

* ``kill``: gpuq's database connection is killed (``pg_terminate_backend``)
  at a random statement of a pass;
* ``crash``: the dispatcher process dies at a random statement of a pass
  (its engine is thrown away, a new dispatcher starts; the cluster lives on);
* ``outage``: the database disappears for a few passes (a TCP proxy in front
  of it is cut), then comes back.

After every fault the database invariants are checked, after every clean
pass the cluster's too (tests/invariants.py); at the end, with faults off,
every job must run to completion. The short variants run in ``make test``;
``pytest -m long_faults tests/integration/test_fault_suite.py -s`` runs the
long ones and prints the figures quoted in docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.exc import DBAPIError

from app.dispatch.dispatcher import Dispatcher
from app.domain.errors import InputError
from app.domain.spec import JobSpec
from app.domain.states import TERMINAL
from app.store import jobs as job_store
from app.store.db import make_engine, make_session_factory
from app.store.orm import JobRow
from tests.faults import Crash, TcpProxy, crash_on, kill_connection_on
from tests.invariants import check_cluster, check_database, sim_pods

DONE = (*TERMINAL, "unschedulable")  # nothing left to do for the dispatcher
TEAMS = [("nlp", "training"), ("recsys", "inference"), ("research", "mixed")]
# the GPU types of each pool in the demo config: a job names only types its pool has
# (anything else is a 422 at submit, app/store/catalog_feasibility.py)
POOL_TYPES = {"training": ["a100-80g", "v100-16g"],
              "inference": ["a100-80g", "v100-16g", "rtx4090-24g"],
              "mixed": ["a100-80g", "v100-16g", "rtx4090-24g"]}


@dataclass
class Run:
    kind: str
    seed: int
    faults: int = 0
    jobs: int = 0
    refused: int = 0  # submissions the store refused (the API's 4xx): never accepted
    passes: int = 0
    violations: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"fault={self.kind} seed={self.seed}: {self.faults} faults injected, "
            f"{self.jobs} jobs ({self.refused} refused at submit), {self.passes} passes, "
            f"{len(self.violations)} invariant violations"
        )


def _spec(rng: random.Random, i: int) -> JobSpec:
    team, pool = rng.choice(TEAMS)
    kind = rng.random()
    if kind < 0.5:
        res = {"gpus": rng.choice([1, 1, 2, 4]), "gpu_types": [rng.choice(POOL_TYPES[pool])]}
    elif kind < 0.65:
        res = {"mig": "auto", "min_gpu_memory_gb": rng.choice([10, 20, 40])}
    elif kind < 0.8:
        res = {"gpu_share": rng.choice([0.25, 0.5]), "gpu_types": ["rtx4090-24g"]}
        team, pool = rng.choice(TEAMS[1:])  # pools that have 4090s
    else:
        res = {"gpu_units": rng.choice([8, 16, 20])}
    body = {
        "name": f"f{i}",
        "team": team,
        "pool": pool,
        "priority": rng.choice(["P0", "P1", "P2", "P2"]),
        "resources": res,
        "duration_estimate_s": rng.randint(5, 60),
    }
    if kind < 0.5 and rng.random() < 0.2:
        body.update(replicas=2, min_available=2)
    return JobSpec.model_validate(body)


def run_faults(
    kind: str,
    seed: int,
    *,
    jobs: int,
    passes: int,
    session_factory,
    cluster,
    clock,
    database_url: str,
) -> Run:
    rng = random.Random(seed)
    run = Run(kind, seed)
    accepted: list[str] = []
    proxy = None
    if kind == "outage":
        proxy = TcpProxy.in_front_of(database_url)

    def new_dispatcher() -> tuple[Dispatcher, Engine]:
        url = proxy.url_for(database_url) if proxy else database_url
        eng = make_engine(url, pool_size=3, pool_timeout_s=5, connect_timeout_s=2)
        return Dispatcher(make_session_factory(eng), cluster, clock=clock), eng

    def submit(n: int) -> None:
        """``n`` jobs accepted; a spec the store refuses (as the API would, 4xx) is
        counted and replaced by the next one."""
        with session_factory() as s:
            target = run.jobs + n
            while run.jobs < target:
                try:
                    sub = job_store.submit_job(s, _spec(rng, run.jobs + run.refused),
                                               now=clock())
                except InputError:  # e.g. a P0 job its pool's guarantee can never hold
                    s.rollback()
                    run.refused += 1
                    continue
                s.commit()  # a 2xx: from here on the job must never be lost
                accepted.append(str(sub.job.id))
                run.jobs += 1

    def cancel_one() -> None:
        with session_factory() as s:
            live = list(s.scalars(select(JobRow).where(JobRow.status.not_in(DONE))
                                  .order_by(JobRow.id).with_for_update()))
            if live:
                job_store.cancel_job(s, rng.choice(live), now=clock(), by="admin")
                s.commit()

    def check(with_cluster: bool) -> None:
        found = check_database(session_factory, accepted)
        if with_cluster:
            found += check_cluster(session_factory, sim_pods(cluster))
        run.violations += found
        assert not found, found

    d, eng = new_dispatcher()
    outage_left = 0
    try:
        for _ in range(passes):
            clock.advance(rng.uniform(1, 6))
            if len(accepted) < jobs:
                submit(min(jobs - len(accepted), rng.randint(0, 6)))
            if rng.random() < 0.05:
                cancel_one()
            run.passes += 1
            fault: Callable | None = None
            if outage_left == 0 and rng.random() < 0.4:
                fault = {"kill": _kill, "crash": _crash, "outage": _outage}[kind]
            if fault is None and outage_left == 0:
                d.run_once()
                check(with_cluster=True)
                continue
            if kind == "outage":
                if outage_left == 0:
                    proxy.cut()
                    run.faults += 1
                    outage_left = rng.randint(1, 4)
                with pytest.raises(DBAPIError):
                    d.run_once()
                outage_left -= 1
                if outage_left == 0:
                    proxy.restore()
                check(with_cluster=False)
                continue
            injected, died = fault(d, eng, rng)
            run.faults += injected
            if died:
                eng.dispose()
                d, eng = new_dispatcher()
            check(with_cluster=False)
        # faults off: everything must run to its end
        if proxy is not None:
            proxy.restore()
        late_failures = 0
        for _ in range(400):
            clock.advance(10)
            try:
                d.run_once()
            except DBAPIError:
                # A pooled connection that the last outage reset can fail one pass after the
                # restore (seen once under load: "server closed the connection" on the leader
                # lock). The dispatcher's loop retries a failed pass; so does this, a few times.
                late_failures += 1
                assert late_failures <= 3, "passes keep failing after the database is back"
                continue
            with session_factory() as s:
                left = s.scalar(select(JobRow.id).where(JobRow.status.not_in(DONE)).limit(1))
            if left is None:
                break
        check(with_cluster=True)
        with session_factory() as s:
            stuck = [
                (j.id, j.status, j.reason)
                for j in s.scalars(select(JobRow).where(JobRow.status.not_in(DONE)))
            ]
        assert not stuck, f"jobs never finished: {stuck[:5]}"
    finally:
        eng.dispose()
        if proxy is not None:
            proxy.close()
    return run


def _kill(d: Dispatcher, eng: Engine, rng: random.Random) -> tuple[bool, bool]:
    """(fault injected, dispatcher died): the connection dies, the process lives."""
    skip = rng.randrange(25)
    with kill_connection_on(eng, lambda sql: True, skip=skip) as hit, contextlib.suppress(
        DBAPIError
    ):
        d.run_once()
    return bool(hit), False


def _crash(d: Dispatcher, eng: Engine, rng: random.Random) -> tuple[bool, bool]:
    with crash_on(eng, skip=rng.randrange(25)) as hit:
        try:
            d.run_once()
        except Crash:
            return True, True
    return bool(hit), False


def _outage(d: Dispatcher, eng: Engine, rng: random.Random) -> tuple[bool, bool]:
    raise AssertionError("outages are driven by the loop itself")


@pytest.mark.parametrize("kind", ["kill", "crash", "outage"])
def test_short_fault_run_keeps_every_invariant(
    kind, session_factory, cluster, clock, database_url
):
    run = run_faults(kind, 12, jobs=30, passes=40, session_factory=session_factory,
                     cluster=cluster, clock=clock, database_url=database_url)
    print(run.line())
    assert run.faults >= 5 and run.jobs == 30
    assert run.violations == []


@pytest.mark.long_faults
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kind", ["kill", "crash", "outage"])
def test_long_fault_run_keeps_every_invariant(
    kind, seed, session_factory, cluster, clock, database_url
):
    run = run_faults(kind, 1000 + seed, jobs=150, passes=200, session_factory=session_factory,
                     cluster=cluster, clock=clock, database_url=database_url)
    print(run.line())
    assert run.violations == []
