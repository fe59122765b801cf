"""Capacity of stopped jobs, held until the cluster confirms their Pods are gone.

When a job stops holding capacity (cancel, preemption, lease reclaim, a
descheduler move, a failed bind) :func:`app.domain.states.change_state`
marks its allocation rows ``releasing_since`` instead of deleting them:
on Kubernetes the evicted Pods keep their GPUs for the grace period, so
handing those cards to another job at once would over-allocate them (the
kubelet rejects the new Pod, or it sits pending). The rows are deleted
(:func:`finalise`) only when the cluster no longer shows the old Pods.
Until then:

* the snapshot counts them as used capacity that belongs to nobody
  (:func:`hold_releasing`): not a running job, so never a preemption
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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from app.cluster.base import BindRequest, Cluster
from app.domain.states import ACTIVE
from app.loops.snapshot import SnapshotContext
from app.scheduling.model import Node, ReplicaPlacement, Snapshot
from app.scheduling.state import EPS, copy_node
from app.store.live import live_allocations
from app.store.orm import AllocationRow, JobRow, NodeRow, releasing_row

log = logging.getLogger(__name__)


def releasing_placements(session: Session) -> list[tuple[str, ReplicaPlacement]]:
    """(job id, placement) of every releasing row."""
    from app.loops.snapshot import placement_of

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
    }


def moved_placements(session: Session) -> dict[str, list[ReplicaPlacement]]:
    """Live placements of active jobs that also have releasing rows: jobs moved
    (preempted and admitted anew in one cycle). After a restart the cluster
    must not adopt their old Pods as the current attempt."""
    from app.loops.snapshot import placement_of

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


# -- snapshot ---------------------------------------------------------------


def hold_releasing(
    nodes: Sequence[Node],
    running: Iterable[Sequence[ReplicaPlacement]],
    releasing: Iterable[ReplicaPlacement],
) -> list[Node]:
    """``nodes`` with the releasing placements marked used (changed nodes are copies).

    Marked as plain usage on the node (``whole_used``, slices, shares, cpu,
    memory) rather than as a running job, so the core cannot preempt it or
    count it against a quota, and the empty cluster's static capacity (what
    could *ever* fit) is unchanged. A card a live allocation already holds
    (a preemptor admitted onto its victim's card, waiting to bind) is not
    marked again; cpu and memory are capped at the node's capacity for the
    same reason.
    """
    by_node: dict[str, list[ReplicaPlacement]] = defaultdict(list)
    for p in releasing:
        by_node[p.node].append(p)
    if not by_node:
        return list(nodes)
    live_whole: set[tuple[str, int]] = set()
    live_slices: set[tuple[str, int, int]] = set()
    live_share: dict[tuple[str, int], float] = defaultdict(float)
    live_cpu: dict[str, float] = defaultdict(float)
    live_mem: dict[str, float] = defaultdict(float)
    for placements in running:
        for p in placements:
            if p.node not in by_node:
                continue
            live_cpu[p.node] += p.cpu
            live_mem[p.node] += p.memory_gb
            if p.mig:
                live_slices.update((p.node, d, i) for d, i, _ in p.mig)
            elif p.share > 0:
                live_share[(p.node, p.devices[0])] += p.share
            else:
                live_whole.update((p.node, d) for d in p.devices)
    out: list[Node] = []
    for node in nodes:
        held = by_node.get(node.name)
        if not held:
            out.append(node)
            continue
        n = copy_node(node)
        for p in held:
            room_cpu = n.cpu - n.cpu_used - live_cpu[n.name]
            room_mem = n.memory_gb - n.memory_used_gb - live_mem[n.name]
            n.cpu_used += max(0.0, min(p.cpu, room_cpu))
            n.memory_used_gb += max(0.0, min(p.memory_gb, room_mem))
            for d in _devices(p):
                if d >= len(n.devices):
                    continue  # the node shrank; nothing left to hold
                dev = n.devices[d]
                if p.mig:
                    for dd, i, _ in p.mig:
                        free = (n.name, d, i) not in live_slices
                        if dd == d and i < len(dev.slices_used) and free:
                            dev.slices_used[i] = True
                elif p.share > 0:
                    room = 1.0 - dev.share_used - live_share[(n.name, d)]
                    dev.share_used += max(0.0, min(p.share, room))
                    dev.share_memory_gb += p.share_memory_gb
                elif (n.name, d) not in live_whole:
                    dev.whole_used = True
        out.append(n)
    return out


def hold_releasing_in_context(session: Session, ctx: SnapshotContext) -> None:
    """For a snapshot not made by build_snapshot (the dispatcher's incremental
    picture): read the releasing rows and mark them used."""
    ctx.releasing = [p for _job, p in releasing_placements(session)]
    hold_in_snapshot(ctx.snapshot, ctx.releasing)


def hold_in_snapshot(snap: Snapshot, releasing: Iterable[ReplicaPlacement]) -> None:
    """Apply :func:`hold_releasing` to ``snap.nodes`` (the nodes list is replaced)."""
    snap.nodes = hold_releasing(snap.nodes, (j.placements for j in snap.running), releasing)


def _devices(p: ReplicaPlacement) -> list[int]:
    if p.mig:
        return sorted({d for d, _, _ in p.mig})
    return list(p.devices)


# -- finalising ---------------------------------------------------------------


@dataclass
class ClusterView:
    """What the cluster shows, read once per pass."""

    running: set[str] = field(default_factory=set)  # jobs with Pods (any attempt)
    draining: set[str] = field(default_factory=set)  # jobs with stopped Pods still holding
    live: set[str] = field(default_factory=set)  # jobs whose current attempt has Pods


def cluster_view(cluster: Cluster) -> ClusterView:
    """Clusters without ``draining_job_ids`` stop synchronously (nothing drains);
    without ``live_job_ids`` every job with Pods runs its current attempt."""
    running = set(cluster.running_job_ids())
    draining_fn = getattr(cluster, "draining_job_ids", None)
    live_fn = getattr(cluster, "live_job_ids", None)
    draining = set(draining_fn()) if draining_fn is not None else set()
    live = set(live_fn()) if live_fn is not None else running - draining
    return ClusterView(running=running, draining=draining, live=live)


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


def blocked_binds(session: Session, binds: Sequence[BindRequest]) -> dict[str, str]:
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
    b: BindRequest,
    rel_by_node: dict[str, list[AllocationRow]],
    live_cpu: dict[str, float],
    live_mem: dict[str, float],
    caps: dict[str, tuple[float, float]],
) -> str | None:
    for p in b.placements:
        held = rel_by_node.get(p.node)
        if not held:
            continue
        mine = set(_devices(p))
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
