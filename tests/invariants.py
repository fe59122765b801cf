"""The invariants a fault must never break, checked against the database and
the cluster after each fault of the fault-injection suite.

Each check returns human-readable violations (empty: all held):

* no job lost: every job that got a 2xx on submit is in the database;
* none run twice at once: a job has at most one set of Pods on the cluster,
  and the cluster runs no Pods of a job the database does not run;
* no card double-booked: no whole card or MIG slice is held by two jobs, in
  the database (live and releasing rows) or on the cluster;
* no quota exceeded: a team's live CU stay within its ``quota_units``;
* no finished job holding capacity: terminal or pending jobs have no live
  allocation rows;
* nothing requeued as "pods lost" while the cluster never lost a Pod.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.domain.states import ACTIVE
from app.store.live_allocations import held_allocations
from app.store.orm import AllocationRow, JobEventRow, JobRow, TeamRow

EPS = 1e-6


def _card_keys(node: str, devices: Iterable[int], mig: Iterable[Any], share: float) -> list:
    mig = list(mig or [])
    if mig:
        return [(node, f"{d}/mig{i}") for d, i, _ in mig]
    if share and share > 0:
        return []  # vGPU shares may stack on one card
    return [(node, int(d)) for d in devices]


def check_database(sf: sessionmaker[Session], accepted: Iterable[str],
                   taken: Iterable[str] = ()) -> list[str]:
    """``taken``: jobs whose Pods the test itself took away (a disruption, an eviction):
    requeued as "pods lost", rightly."""
    out: list[str] = []
    taken = {str(j) for j in taken}
    with sf() as s:
        status = {str(i): st for i, st in s.execute(select(JobRow.id, JobRow.status))}
        lost = sorted(set(accepted) - set(status), key=int)
        if lost:
            out.append(f"jobs that got a 2xx are missing: {lost[:10]}")
        held: dict[Any, str] = {}
        rows = s.execute(
            held_allocations(
                AllocationRow.job_id, AllocationRow.node, AllocationRow.devices,
                AllocationRow.mig, AllocationRow.share,
            )
        ).all()
        for job_id, node, devices, mig, share in rows:
            for key in _card_keys(node, devices, mig, share):
                other = held.setdefault(key, str(job_id))
                if other != str(job_id):
                    out.append(f"card {key} held by jobs {other} and {job_id}")
        stale = s.execute(
            select(AllocationRow.job_id, JobRow.status)
            .join(JobRow, JobRow.id == AllocationRow.job_id)
            .where(AllocationRow.releasing_since.is_(None), JobRow.status.not_in(ACTIVE))
        ).all()
        for job_id, st in stale:
            out.append(f"job {job_id} is {st} but still holds capacity")
        quotas = {t.name: t.quota_units for t in s.scalars(select(TeamRow))}
        used: dict[str, float] = {}
        for team, units in s.execute(held_allocations(JobRow.team, AllocationRow.units)
                                     .where(AllocationRow.releasing_since.is_(None))):
            used[team] = used.get(team, 0.0) + float(units or 0)
        for team, cu in used.items():
            q = quotas.get(team)
            if q is not None and cu > q + EPS:
                out.append(f"team {team} uses {cu} CU over its quota {q}")
        lost_pods = s.execute(
            select(JobEventRow.job_id, JobEventRow.reason).where(
                JobEventRow.type == "requeued", JobEventRow.reason.like("pods lost%")
            )
        ).all()
        for job_id, reason in lost_pods:
            if str(job_id) in taken:
                continue
            out.append(f"job {job_id} requeued although the cluster lost nothing: {reason}")
    return out


def check_cluster(sf: sessionmaker[Session], pods_by_job: dict[str, set[Any]]) -> list[str]:
    """``pods_by_job``: job id -> the set of its Pod attempts holding resources
    on the cluster (bind ids, or one marker per job on the simulated cluster)."""
    out: list[str] = []
    with sf() as s:
        status = {str(i): st for i, st in s.execute(select(JobRow.id, JobRow.status))}
    for job_id, attempts in pods_by_job.items():
        if len(attempts) > 1:
            out.append(f"job {job_id} runs {len(attempts)} sets of Pods at once")
        if status.get(job_id) not in ACTIVE:
            out.append(f"the cluster runs job {job_id}, which is {status.get(job_id)}")
    return out


def sim_pods(cluster: Any) -> dict[str, set[Any]]:
    """The simulated cluster's running pods, with a card check of its own."""
    return {job_id: {"pod"} for job_id in cluster.running_job_ids()}
