"""The one place reports read the database: job rows -> :class:`JobRecord`.

Everything else in :mod:`app.reports` is pure. A finished job no longer
holds allocation rows, so the GPU type it ran on comes from its last
``admitted`` event (its placements, or the nodes it was placed on mapped
through the node table); a job that never ran is filed under the type it waits for.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime, timedelta

from sqlalchemy import BigInteger, any_, literal, or_, select, text, union_all
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session

from app.clock import to_epoch
from app.reports.records import JobRecord
from app.reports.utilization import CPU_ONLY, wanted_type_of
from app.store.live import live_allocations
from app.store.orm import AllocationRow, JobRow, NodeRow, PoolRow
from app.store.states import wait_seconds


def job_records(session: Session, now: datetime, window_s: float | None) -> list[JobRecord]:
    """Jobs still pending, or with a submit/admit/finish inside the window (all when None).

    Reads columns, not ORM objects (a report touches thousands of rows): the job's
    timing, its ``resources`` from the spec, and separately the GPU types it holds or held.
    With a window the jobs come in four disjoint parts, each through its own index
    (migration 0004): pending; finished since T; admitted since T (not finished since);
    submitted since T (neither). One OR over the four made PostgreSQL misjudge the
    overlap of the conditions and read the whole table; this way the cost follows the
    window, not the history.
    """
    cols = (
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
        JobRow.spec["resources"]["gpus"].astext.label("gpus"),
        JobRow.spec["resources"]["gpu_types"][0].astext.label("first_type"),
    )
    conn = session.connection()
    if window_s is None:
        rows = conn.execute(select(*cols)).all()
    else:
        since = now - timedelta(seconds=window_s)
        done = JobRow.status != "pending"
        not_fin = or_(JobRow.finished_at < since, JobRow.finished_at.is_(None))
        not_adm = or_(JobRow.admitted_at < since, JobRow.admitted_at.is_(None))
        parts = (
            select(*cols).where(JobRow.status == "pending"),
            select(*cols).where(done, JobRow.finished_at >= since),
            select(*cols).where(done, not_fin, JobRow.admitted_at >= since),
            select(*cols).where(done, not_fin, not_adm, JobRow.submitted_at >= since),
        )
        rows = conn.execute(union_all(*parts)).all()
    pools = _pool_types(session)
    ids = [r.id for r in rows if r.status != "pending"]
    held: dict[int, set[str]] = defaultdict(set)
    ran_on: dict[int, str] = {}
    if ids:
        for job_id, gpu_type in conn.execute(
            live_allocations(AllocationRow.job_id, AllocationRow.gpu_type).where(
                AllocationRow.job_id == any_(literal(ids, ARRAY(BigInteger)))
            )
        ):
            held[job_id].add(gpu_type or CPU_ONLY)
        # finished jobs: where did they run? (their allocation rows are freed)
        need = [i for i in ids if i not in held]
        if need:
            node_type = dict(conn.execute(select(NodeRow.name, NodeRow.gpu_type)).all())
            for job_id, placed, nodes in conn.execute(_LAST_ADMISSION, {"ids": need}):
                if placed:
                    types = sorted({t or CPU_ONLY for t in placed})
                else:
                    types = sorted({node_type.get(n) or CPU_ONLY for n in nodes or ()})
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
            gpu_type = _wanted(r.gpus, r.first_type, r.pool, pools)
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


# The GPU types of each job's last admission (its placements; older events name nodes only).
_LAST_ADMISSION = text(
    """
    SELECT DISTINCT ON (job_id) job_id,
        ARRAY(SELECT DISTINCT COALESCE(p ->> 'gpu_type', '')
              FROM jsonb_array_elements(data -> 'placements') AS p) AS placed,
        ARRAY(SELECT jsonb_array_elements_text(data -> 'nodes')) AS nodes
    FROM job_events
    WHERE job_id = ANY(CAST(:ids AS bigint[])) AND to_status = 'admitted'  -- partial index
    ORDER BY job_id, id DESC
    """
)


def _pool_types(session: Session) -> dict[str, list[str]]:
    return {n: list(t or ()) for n, t in session.execute(select(PoolRow.name, PoolRow.gpu_types))}


def _wanted(gpus: str | None, first_type: str | None, pool: str, pools: Mapping) -> str:
    return wanted_type_of(gpus == "0", first_type, pools.get(pool, ()))
