"""Capacity of stopped jobs, held until the cluster confirms their Pods are gone.

When a job stops holding capacity (cancel, preemption, lease reclaim, a
descheduler move, a failed bind) :func:`app.store.state_changes.change_state`
marks its allocation rows ``releasing_since`` instead of deleting them:
on Kubernetes the evicted Pods keep their GPUs for the grace period, so
handing those cards to another job at once would over-allocate them (the
kubelet rejects the new Pod, or it sits pending). The rows are deleted
(:func:`finalise`) only when the cluster no longer shows the old Pods.
Until then:

* the snapshot counts them as used capacity that belongs to nobody
  (:func:`app.scheduling.releasing.hold_releasing`): not a running job, so never a preemption
  victim and never part of a team's or pool's usage;
* a job admitted onto such capacity in the same cycle (a preemptor onto
  its victim's cards: kube-scheduler's *nominated node*) keeps its
  allocation but is not bound (:func:`blocked_binds`); the reconcile step
  binds it on a later pass, once the capacity is released.

A crash anywhere is safe: the marks and the state change are one
transaction, reconcile stops Pods of jobs that no longer hold capacity, and
a row is deleted only after the cluster shows no Pod that could hold it, so
capacity is released exactly once and never before the Pods are gone.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from app.domain.states import ACTIVE
from app.scheduling.model import ReplicaPlacement
from app.scheduling.releasing import placement_devices
from app.scheduling.state import EPS
from app.store.convert import placement_of
from app.store.live_allocations import live_allocations
from app.store.orm import AllocationRow, JobRow, NodeRow, releasing_row

log = logging.getLogger(__name__)


class BindLike(Protocol):
    """What :func:`blocked_binds` reads of a bind (``app.cluster.interface.BindRequest``)."""

    @property
    def job_id(self) -> str: ...

    @property
    def placements(self) -> Sequence[ReplicaPlacement]: ...


def releasing_placements(session: Session) -> list[tuple[str, ReplicaPlacement]]:
    """(job id, placement) of every releasing row."""
    rows = session.scalars(
        select(AllocationRow)
        .where(releasing_row())
        .order_by(AllocationRow.id)
    )
    return [(str(r.job_id), placement_of(r)) for r in rows]


def releasing_units(session: Session) -> dict[str, float]:
    """CU held by stopping pods, by GPU type (the ``gpuq_releasing_units`` gauge)."""
    return {
        t: float(cu or 0)
        for t, cu in session.execute(
            select(AllocationRow.gpu_type, func.sum(AllocationRow.units))
            .where(releasing_row(), AllocationRow.gpu_type.is_not(None))
            .group_by(AllocationRow.gpu_type)
        )
        if t is not None  # excluded by the query; this narrows the column's type
    }


def moved_placements(session: Session) -> dict[str, list[ReplicaPlacement]]:
    """Live placements of active jobs that also have releasing rows: jobs moved
    (preempted and admitted anew in one cycle). After a restart the cluster
    must not adopt their old Pods as the current attempt."""
    moved = (
        select(AllocationRow.job_id)
        .where(releasing_row())
        .distinct()
        .scalar_subquery()
    )
    rows = session.scalars(
        live_allocations()
        .where(AllocationRow.job_id.in_(moved))
        .order_by(AllocationRow.job_id, AllocationRow.replica)
    )
    out: dict[str, list[ReplicaPlacement]] = defaultdict(list)
    for r in rows:
        out[str(r.job_id)].append(placement_of(r))
    return dict(out)


# -- finalising ---------------------------------------------------------------


@dataclass
class ClusterView:
    """What the cluster shows, read once per pass."""

    running: set[str] = field(default_factory=set)  # jobs with Pods (any attempt)
    draining: set[str] = field(default_factory=set)  # jobs with stopped Pods still holding
    live: set[str] = field(default_factory=set)  # jobs whose current attempt has Pods


def any_releasing(session: Session) -> bool:
    """One index probe: is any capacity waiting for its Pods to go?"""
    return session.scalar(
        select(AllocationRow.id).where(releasing_row()).limit(1)
    ) is not None


def finalise(session: Session, view: ClusterView) -> set[str]:
    """Delete the releasing rows whose Pods the cluster no longer shows.

    A job that holds no capacity now is released only when it has no Pod at
    all (``running`` includes Pods whose stop was not issued yet, e.g. after
    a crash between the state change and the stop); a job admitted anew is
    released when no Pod of a stopped attempt holds anything. Only rows read
    here (by id) are deleted, so a row marked after ``view`` was taken waits
    for the next pass. Returns the released job ids; the caller commits.
    """
    rows = session.execute(
        select(AllocationRow.id, AllocationRow.job_id, JobRow.status)
        .join(JobRow, JobRow.id == AllocationRow.job_id)
        .where(releasing_row())
    ).all()
    done_ids: list[int] = []
    released: set[str] = set()
    for row_id, job_id, status in rows:
        jid = str(job_id)
        if jid in view.draining:
            continue
        if status not in ACTIVE and jid in view.running:
            continue
        done_ids.append(row_id)
        released.add(jid)
    if done_ids:
        session.execute(
            delete(AllocationRow)
            .where(AllocationRow.id.in_(done_ids), releasing_row())
            .execution_options(synchronize_session=False)
        )
        log.info("capacity of %d stopped job(s) released: %s", len(released),
                 ", ".join(sorted(released)))
    return released


# -- binds ----------------------------------------------------------------------


def blocked_binds(session: Session, binds: Sequence[BindLike]) -> dict[str, str]:
    """Binds that would land on capacity still held by stopping Pods -> why.

    Checked against the database (releasing rows of any job, the job's own
    old rows included): a card, MIG slice or shared card in common, or a
    node whose cpu/memory cannot hold both the live allocations and the
    releasing ones.
    """
    if not binds:
        return {}
    nodes = {p.node for b in binds for p in b.placements}
    rel = session.scalars(
        select(AllocationRow).where(
            releasing_row(), AllocationRow.node.in_(nodes)
        )
    ).all()
    if not rel:
        return {}
    rel_by_node: dict[str, list[AllocationRow]] = defaultdict(list)
    for r in rel:
        rel_by_node[r.node].append(r)
    live_cpu: dict[str, float] = defaultdict(float)
    live_mem: dict[str, float] = defaultdict(float)
    for node, cpu, mem in session.execute(
        live_allocations(AllocationRow.node, AllocationRow.cpu, AllocationRow.memory_gb)
        .where(AllocationRow.node.in_(list(rel_by_node)))
    ):
        live_cpu[node] += cpu
        live_mem[node] += mem
    caps = {
        r.name: (r.cpu, r.memory_gb)
        for r in session.scalars(select(NodeRow).where(NodeRow.name.in_(list(rel_by_node))))
    }
    out: dict[str, str] = {}
    for b in binds:
        why = _why_blocked(b, rel_by_node, live_cpu, live_mem, caps)
        if why:
            out[b.job_id] = why
    return out


def _why_blocked(
    b: BindLike,
    rel_by_node: dict[str, list[AllocationRow]],
    live_cpu: dict[str, float],
    live_mem: dict[str, float],
    caps: dict[str, tuple[float, float]],
) -> str | None:
    for p in b.placements:
        held = rel_by_node.get(p.node)
        if not held:
            continue
        mine = set(placement_devices(p))
        mine_slices = {(d, i) for d, i, _ in p.mig}
        for r in held:
            theirs_slices = {(int(d), int(i)) for d, i, _ in r.mig}
            theirs = {int(d) for d in r.devices} | {d for d, _ in theirs_slices}
            both_mig = bool(p.mig and r.mig)
            clash = bool(mine_slices & theirs_slices) if both_mig else bool(mine & theirs)
            if clash:
                return (f"waiting for job {r.job_id}'s pods on {p.node} to stop "
                        f"(devices {sorted(mine & theirs)})")
        cap = caps.get(p.node)
        if cap is not None:
            cpu = live_cpu[p.node] + sum(r.cpu for r in held)
            mem = live_mem[p.node] + sum(r.memory_gb for r in held)
            if cpu > cap[0] + EPS or mem > cap[1] + EPS:
                return f"waiting for stopping pods on {p.node} to free cpu/memory"
    return None
