"""The job rows the dispatcher's parts read and lock.

Every statement the dispatcher issues lives in the store; its parts
(:mod:`app.dispatch`) call these. Nothing here commits.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session, selectinload

from app.domain.owner import owner_of
from app.domain.spec import job_id_number
from app.domain.states import ACTIVE
from app.store.orm import JobEventRow, JobRow


def lock_job(session: Session, job_id: str) -> JobRow | None:
    """The job (with its allocations) locked for update; None if the id is not ours."""
    jid = job_id_number(job_id)
    if jid is None:
        return None
    return session.scalar(
        select(JobRow)
        .where(JobRow.id == jid)
        .options(selectinload(JobRow.allocations))
        .with_for_update()
    )


def lock_jobs(
    session: Session, job_ids: set[str], *, with_allocations: bool = True
) -> dict[str, JobRow]:
    """The named jobs locked for update in one query, in id order (no deadlocks
    between two writers locking overlapping sets)."""
    ids = [int(j) for j in job_ids if j.isdigit()]
    if not ids:
        return {}
    q = select(JobRow).where(JobRow.id.in_(ids)).order_by(JobRow.id).with_for_update()
    if with_allocations:
        q = q.options(selectinload(JobRow.allocations))
    return {str(r.id): r for r in session.scalars(q)}


def active_states(session: Session) -> dict[str, str]:
    """Job id -> status of every job holding capacity (ids and states only)."""
    return {
        str(i): st
        for i, st in session.execute(
            select(JobRow.id, JobRow.status).where(JobRow.status.in_(ACTIVE))
        )
    }


# the rule: a running job whose current run (from ``started_at``) has reached its limit
_PAST_LIMIT_WHERE = (
    "status = 'running' AND spec ->> 'time_limit_s' IS NOT NULL"
    " AND started_at + make_interval(secs => CAST(spec ->> 'time_limit_s' AS float8))"
    " <= CAST(:now AS timestamptz)"
)
_PAST_LIMIT = text(
    "SELECT id, CAST(spec ->> 'time_limit_s' AS float8) FROM jobs"
    f" WHERE {_PAST_LIMIT_WHERE} ORDER BY id"
)
_PAST_LIMIT_OF = text(
    "SELECT id, CAST(spec ->> 'time_limit_s' AS float8) FROM jobs"
    f" WHERE id = ANY(:ids) AND {_PAST_LIMIT_WHERE} ORDER BY id"
)


def past_time_limit(
    session: Session, now: datetime, job_ids: list[int] | None = None,
) -> list[tuple[int, float]]:
    """(id, time_limit_s) of the running jobs whose current run has reached its limit
    (``started_at`` is the run's start), of all of them or of ``job_ids``: the one rule
    the reconcile's stops and the ingest's reading of a Pod's end both ask. Reads the
    running jobs only (the index leading with the status), not the history."""
    if job_ids is None:
        rows = session.execute(_PAST_LIMIT, {"now": now})
    else:
        rows = session.execute(_PAST_LIMIT_OF, {"now": now, "ids": job_ids})
    return [(int(i), float(s)) for i, s in rows]


def active_owners(session: Session) -> dict[str, tuple[str, str | None]]:
    """Job id -> (team, the workload's namespace or None) of every job holding capacity:
    where each one's Pods may be (the reconcile after a restart reads it)."""
    out: dict[str, tuple[str, str | None]] = {}
    for i, team, by, key in session.execute(
        select(JobRow.id, JobRow.team, JobRow.submitted_by, JobRow.idempotency_key)
        .where(JobRow.status.in_(ACTIVE))
    ):
        owner = owner_of(by, key)
        out[str(i)] = (team, owner.namespace if owner is not None else None)
    return out


def jobs_with_allocations(session: Session, job_ids: list[int]) -> list[JobRow]:
    return list(
        session.scalars(
            select(JobRow).where(JobRow.id.in_(job_ids)).options(selectinload(JobRow.allocations))
        )
    )


def retry_count(session: Session, job_id: int) -> int:
    """How often the job's run failed and was retried (its ``retried`` events)."""
    return int(
        session.scalar(
            select(func.count())
            .select_from(JobEventRow)
            .where(JobEventRow.job_id == job_id, JobEventRow.type == "retried")
        )
        or 0
    )
