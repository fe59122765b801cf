"""The one place reports read the database: job rows -> :class:`JobRecord`.

Everything else in :mod:`app.reports` is pure. A finished job no longer
holds allocation rows, so the GPU type it ran on comes from its last
``admitted`` event (its placements, or the nodes it was placed on mapped
through the node table); a job that never ran is filed under the type it waits for.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from app.clock import to_epoch
from app.reports.records import JobRecord
from app.reports.utilization import ANY_TYPE, CPU_ONLY
from app.store.live import live_allocations
from app.store.orm import AllocationRow, JobEventRow, JobRow, NodeRow, PoolRow
from app.store.states import wait_seconds


def _wanted_from_spec(spec: Mapping) -> str:
    res = (spec or {}).get("resources") or {}
    if res.get("gpus") == 0:
        return CPU_ONLY
    types = res.get("gpu_types") or []
    if types:
        return str(types[0])
    return ANY_TYPE


def job_records(session: Session, now: datetime, window_s: float | None) -> list[JobRecord]:
    """Jobs still pending, or with a submit/admit/finish inside the window (all when None).

    Reads columns, not ORM objects (a report touches thousands of rows): the job's
    timing, its ``resources`` from the spec, and separately the GPU types it holds or held.
    """
    q = select(
        JobRow.id,
        JobRow.team,
        JobRow.pool,
        JobRow.priority,
        JobRow.status,
        JobRow.submitted_at,
        JobRow.queued_at,
        JobRow.waited_s,
        JobRow.admitted_at,
        JobRow.finished_at,
        JobRow.spec["resources"].label("resources"),
    )
    if window_s is not None:
        since = now - timedelta(seconds=window_s)
        q = q.where(
            or_(
                JobRow.status == "pending",
                JobRow.submitted_at >= since,
                JobRow.admitted_at >= since,
                JobRow.finished_at >= since,
            )
        )
    rows = session.execute(q).all()
    pool_types = {p.name: list(p.gpu_types or []) for p in session.scalars(select(PoolRow))}
    node_type = {n.name: n.gpu_type for n in session.scalars(select(NodeRow))}
    ids = [r.id for r in rows if r.status != "pending"]
    held: dict[int, set[str]] = defaultdict(set)
    for chunk in _chunks(ids):
        for job_id, gpu_type in session.execute(
            live_allocations(AllocationRow.job_id, AllocationRow.gpu_type).where(
                AllocationRow.job_id.in_(chunk)
            )
        ):
            held[job_id].add(gpu_type or CPU_ONLY)
    # finished jobs: where did they run? (their allocation rows are freed)
    need_events = [i for i in ids if i not in held]
    ran_on: dict[int, str] = {}
    for chunk in _chunks(need_events):
        for job_id, data in session.execute(
            select(JobEventRow.job_id, JobEventRow.data)
            .where(JobEventRow.job_id.in_(chunk), JobEventRow.to_status == "admitted")
            .order_by(JobEventRow.id)
        ):
            data = data or {}
            placed = data.get("placements") or []
            if placed:
                types = sorted({p.get("gpu_type") or CPU_ONLY for p in placed})
            else:
                types = sorted({node_type.get(n) or CPU_ONLY for n in data.get("nodes", [])})
            if types:
                ran_on[job_id] = types[0] if len(types) == 1 else "mixed"
    out = []
    for r in rows:
        if r.id in held:
            types = sorted(held[r.id])
            gpu_type = types[0] if len(types) == 1 else "mixed"
        elif r.id in ran_on:
            gpu_type = ran_on[r.id]
        else:
            gpu_type = _wanted_from_spec({"resources": r.resources or {}})
            if gpu_type == ANY_TYPE and pool_types.get(r.pool):
                gpu_type = pool_types[r.pool][0]
        out.append(
            JobRecord(
                id=str(r.id),
                team=r.team,
                pool=r.pool,
                priority=r.priority,
                gpu_type=gpu_type,
                status=r.status,
                submitted_at=to_epoch(r.submitted_at),
                wait_s=wait_seconds(r, now),  # the row has the columns it reads
                admitted_at=to_epoch(r.admitted_at) if r.admitted_at else None,
                finished_at=to_epoch(r.finished_at) if r.finished_at else None,
            )
        )
    return out


def _chunks(ids: list[int], size: int = 5000) -> Iterator[list[int]]:
    for i in range(0, len(ids), size):
        yield ids[i : i + size]
