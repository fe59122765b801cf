"""Database -> :class:`Snapshot`: what one scheduling cycle looks at.

Shared by the dispatcher and by anyone who needs the core's view of the
live system (quota, descheduler, reports). ``now`` comes from the caller's
clock so tests control time.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from app.clock import to_epoch
from app.domain.states import ACTIVE
from app.scheduling.model import (
    GpuType,
    JobRequest,
    LeaseInfo,
    Node,
    PoolInfo,
    PriorityInfo,
    ReplicaPlacement,
    RunningJob,
    SchedulerConfig,
    Snapshot,
    TeamInfo,
)
from app.scheduling.releasing import hold_in_snapshot
from app.store.config_loader import scheduler_knobs
from app.store.convert import (
    gpu_type_info,
    job_request,
    lease_info,
    node_info,
    placement_of,
    pool_info,
    team_info,
)
from app.store.orm import (
    GpuTypeRow,
    JobEventRow,
    JobRow,
    LeaseRow,
    NodeRow,
    PoolRow,
    PriorityClassRow,
    TeamRow,
)
from app.store.releasing_rows import releasing_placements


@dataclass
class SnapshotContext:
    """The snapshot plus what the writer needs to detect concurrent changes."""

    snapshot: Snapshot
    revisions: dict[str, int] = field(default_factory=dict)  # job id -> revision seen
    # pending job id -> (reason, queue_position) as stored, so unchanged rows are not rewritten
    pending_meta: dict[str, tuple[str | None, int | None]] = field(default_factory=dict)
    # placements of stopped jobs whose Pods may still hold them (already marked
    # used on snapshot.nodes; re-apply with hold_in_snapshot if nodes are replaced)
    releasing: list[ReplicaPlacement] = field(default_factory=list)


def with_preemption_history(
    session: Session, pending: list[JobRequest], job_ids: list[int]
) -> list[JobRequest]:
    """Fill last_preempted_at/by and last_reclaimed_at from the job events, for
    the core's thrash guard (only jobs that were ever preempted are looked up)."""
    last: dict[str, tuple[float, str | None]] = {}
    reclaimed: dict[str, float] = {}
    for ev in session.scalars(
        select(JobEventRow)
        .where(JobEventRow.job_id.in_(job_ids), JobEventRow.type.in_(["preempted", "reclaimed"]))
        .order_by(JobEventRow.job_id, JobEventRow.at, JobEventRow.id)
    ):
        at = to_epoch(ev.at)
        by = (ev.data or {}).get("by_job")
        last[str(ev.job_id)] = (at, str(by) if by is not None else None)
        if ev.type == "reclaimed":
            reclaimed[str(ev.job_id)] = at
    out = []
    for r in pending:
        if r.id in last:
            at, by = last[r.id]
            r = replace(r, last_preempted_at=at, last_preempted_by=by,
                        last_reclaimed_at=reclaimed.get(r.id))
        out.append(r)
    return out


@dataclass
class Catalog:
    """The small tables every cycle reads in full. One reader and one Snapshot
    constructor for build_snapshot and the dispatcher's QueuePicture, so the
    two cannot drift apart in how they see the cluster."""

    gpu_types: dict[str, GpuType]
    nodes: list[Node]
    pools: dict[str, PoolInfo]
    teams: dict[str, TeamInfo]
    priorities: dict[str, PriorityInfo]

    def snapshot(
        self,
        now: datetime,
        running: list[RunningJob],
        pending: list[JobRequest],
        config: SchedulerConfig,
    ) -> Snapshot:
        return Snapshot(
            now=to_epoch(now),
            gpu_types=self.gpu_types,
            nodes=self.nodes,
            pools=self.pools,
            teams=self.teams,
            priorities=self.priorities,
            running=running,
            pending=pending,
            config=config,
        )


def read_catalog(session: Session) -> Catalog:
    return Catalog(
        gpu_types={r.name: gpu_type_info(r) for r in session.scalars(select(GpuTypeRow))},
        nodes=[node_info(r) for r in session.scalars(select(NodeRow).order_by(NodeRow.name))],
        pools={r.name: pool_info(r) for r in session.scalars(select(PoolRow))},
        teams={r.name: team_info(r) for r in session.scalars(select(TeamRow))},
        priorities={
            r.name: PriorityInfo(r.name, r.value, r.preemptible)
            for r in session.scalars(select(PriorityClassRow))
        },
    )


def build_snapshot(session: Session, now: datetime) -> SnapshotContext:
    """Read everything a cycle needs in one session (one consistent view)."""
    catalog = read_catalog(session)
    pools, priorities = catalog.pools, catalog.priorities
    leases: dict[int, list[LeaseInfo]] = defaultdict(list)
    for lr in session.scalars(select(LeaseRow).where(LeaseRow.state == "active")):
        leases[lr.job_id].append(lease_info(lr))

    ctx_revisions: dict[str, int] = {}
    pending_meta: dict[str, tuple[str | None, int | None]] = {}
    running: list[RunningJob] = []
    pending: list[JobRequest] = []
    rows = session.scalars(
        select(JobRow)
        .where(JobRow.status.in_([*ACTIVE, "pending"]))
        .options(selectinload(JobRow.allocations))
        .order_by(JobRow.id)
    )
    preempted: list[int] = []
    for job in rows:
        ctx_revisions[str(job.id)] = job.revision
        req = job_request(job, priorities, pools)
        if job.status == "pending":
            pending.append(req)
            pending_meta[str(job.id)] = (job.reason, job.queue_position)
            if job.preemption_count:
                preempted.append(job.id)
        else:
            start = job.started_at or job.admitted_at or job.submitted_at
            running.append(
                RunningJob(
                    request=req,
                    placements=tuple(placement_of(a) for a in job.allocations),
                    started_at=to_epoch(start),
                    leases=tuple(leases.get(job.id, ())),
                )
            )
    if preempted:
        pending = with_preemption_history(session, pending, preempted)
    snap = catalog.snapshot(
        now, running, pending, SchedulerConfig.from_mapping(scheduler_knobs(session))
    )
    releasing = [p for _job, p in releasing_placements(session)]
    hold_in_snapshot(snap, releasing)  # used, preemptible by nobody, in no quota
    return SnapshotContext(
        snapshot=snap, revisions=ctx_revisions, pending_meta=pending_meta, releasing=releasing
    )
