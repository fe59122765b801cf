"""Job rows: submit (with reference checks and idempotency), read, list, cancel.

Functions here flush but never commit; the route or loop that calls them
owns the unit of work.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import BigInteger, column, insert, select, text
from sqlalchemy.orm import Session, selectinload

from app.domain.errors import Conflict, InputError, NotFound
from app.domain.spec import JobSpec
from app.domain.states import CANCELLABLE, STATUSES, TERMINAL
from app.store.catalog_cache import CatalogView, NameRef, TeamRef, current_catalog
from app.store.orm import (
    AllocationRow,
    JobEventRow,
    JobRow,
    LeaseRow,
    releasing_row,
)
from app.store.queue_order import fill_queue_positions
from app.store.states import change_state

NOTIFY_CHANNEL = "gpuq_jobs"
MAX_LIMIT = 500


@dataclass(frozen=True)
class Submitted:
    job: JobRow
    created: bool


def spec_hash(spec: JobSpec) -> str:
    return hashlib.sha256(
        json.dumps(spec.model_dump(mode="json"), sort_keys=True).encode()
    ).hexdigest()


def resolve_references(
    session: Session, spec: JobSpec, catalog: CatalogView | None = None
) -> tuple[TeamRef, NameRef, NameRef]:
    """Team, pool and priority of a spec; every unknown name is an :class:`InputError`.

    Checked against the cached catalog (:mod:`app.store.catalog_cache`); the
    foreign keys of ``jobs`` still guard the insert itself.
    """
    cat = catalog or current_catalog(session)
    team = cat.teams.get(spec.team)
    if team is None:
        raise InputError(f"unknown team {spec.team!r}", "team")
    pool_name = spec.pool or team.pool
    pool = cat.pools.get(pool_name)
    if pool is None:
        raise InputError(f"unknown pool {pool_name!r}", "pool")
    if pool_name != team.pool and pool_name not in team.allowed_pools:
        allowed = ", ".join([team.pool, *team.allowed_pools])
        raise InputError(
            f"team {team.name} may not use pool {pool_name!r} (allowed: {allowed})", "pool"
        )
    prio_name = spec.priority or team.default_priority
    prio = cat.priorities.get(prio_name)
    if prio is None:
        raise InputError(f"unknown priority class {prio_name!r}", "priority")
    r = spec.resources
    types = cat.types
    for fld, names in (
        ("resources.gpu_types", r.gpu_types),
        ("resources.avoid_gpu_types", r.avoid_gpu_types),
    ):
        for n in names:
            if n not in types:
                raise InputError(f"unknown GPU type {n!r}", fld)
    if r.mig is not None and r.mig != "auto":
        profiles = {p for t in types.values() for p in (t.mig_profiles or {})}
        if r.mig not in profiles:
            raise InputError(
                f"unknown MIG profile {r.mig!r} (known: {', '.join(sorted(profiles)) or 'none'})",
                "resources.mig",
            )
    if r.gpu_share is not None and not any(t.shareable for t in types.values()):
        raise InputError("no GPU type is shareable", "resources.gpu_share")
    return team, pool, prio


def requested_units(
    session: Session, spec: JobSpec, catalog: CatalogView | None = None
) -> float | None:
    """CU a pending job asks for, when the spec pins it down."""
    r = spec.resources
    if r.gpu_units is not None:
        return r.gpu_units
    if r.gpus is not None and r.gpus == 0:
        return 0.0
    if r.gpus is not None and len(r.gpu_types) == 1:
        t = (catalog or current_catalog(session)).types.get(r.gpu_types[0])
        return t.weight * r.gpus * spec.replica_count if t else None
    return None


# The ``submitted`` event and the wake-up of the dispatcher in one statement.
_SUBMITTED = text(
    f"""
    INSERT INTO job_events (job_id, at, type, from_status, to_status, reason, data)
    SELECT id, CAST(:now AS timestamptz), 'submitted', NULL, 'pending', NULL, '{{}}'::jsonb
    FROM unnest(CAST(:ids AS bigint[])) AS id, pg_notify('{NOTIFY_CHANNEL}', '') AS n
    """
)


def submit_job(
    session: Session, spec: JobSpec, *, now: datetime, idempotency_key: str | None = None
) -> Submitted:
    """Insert a pending job: a cached catalog check, one INSERT ... RETURNING,
    one statement for its event and the NOTIFY.

    With an ``idempotency_key``, the same key from the same team returns the
    job it created the first time; a different body with the same key is a
    conflict.
    """
    h = spec_hash(spec) if idempotency_key is not None else None
    if idempotency_key is not None:
        existing = find_by_idempotency_key(session, spec.team, idempotency_key)
        if existing is not None:
            if existing.idempotency_hash != h:
                raise Conflict(
                    "this key was already used with a different job body", "Idempotency-Key"
                )
            return Submitted(existing, False)
    catalog = current_catalog(session)
    team, pool, prio = resolve_references(session, spec, catalog)
    job = JobRow(
        name=spec.name,
        team=team.name,
        pool=pool.name,
        priority=prio.name,
        status="pending",
        reason=None,
        spec=spec.model_dump(mode="json", exclude_none=True),
        units=requested_units(session, spec, catalog),
        submitted_at=now,
        queued_at=now,
        waited_s=0.0,
        preemption_count=0,
        queue_position=None,
        admitted_at=None,
        started_at=None,
        finished_at=None,
        idempotency_key=idempotency_key,
        idempotency_hash=h,
        allocations=[],  # known empty: reading it never costs a query
    )
    session.add(job)
    session.flush()
    session.execute(_SUBMITTED, {"now": now, "ids": [job.id]})
    return Submitted(job, True)


def submit_jobs(session: Session, specs: list[JobSpec], *, now: datetime) -> list[int]:
    """Insert many pending jobs: one multi-row INSERT for the jobs, one statement
    for their ``submitted`` events and the NOTIFY. All or nothing: the first bad
    spec is an :class:`InputError` naming its index, and nothing is inserted."""
    if not specs:
        return []
    catalog = current_catalog(session)
    rows = []
    for i, spec in enumerate(specs):
        try:
            team, pool, prio = resolve_references(session, spec, catalog)
        except InputError as e:
            msg = e.detail.split(": ", 1)[1] if e.field else e.detail
            raise InputError(msg, f"jobs[{i}].{e.field}" if e.field else f"jobs[{i}]") from None
        rows.append(
            {
                "name": spec.name,
                "team": team.name,
                "pool": pool.name,
                "priority": prio.name,
                "status": "pending",
                "spec": spec.model_dump(mode="json", exclude_none=True),
                "units": requested_units(session, spec, catalog),
                "submitted_at": now,
                "queued_at": now,
                "waited_s": 0.0,
                "preemption_count": 0,
            }
        )
    jobs = JobRow.__table__
    conn = session.connection()
    ids = list(
        conn.execute(
            insert(jobs).returning(jobs.c.id, sort_by_parameter_order=True), rows
        ).scalars()
    )
    conn.execute(_SUBMITTED, {"now": now, "ids": ids})
    return ids


def find_by_idempotency_key(session: Session, team: str, key: str) -> JobRow | None:
    return session.scalar(
        select(JobRow)
        .where(JobRow.team == team, JobRow.idempotency_key == key)
        .options(selectinload(JobRow.allocations))
    )


def get_job(
    session: Session, job_id: str, *, team: str | None = None, for_update: bool = False
) -> JobRow:
    """One job; with ``team``, a job of another team does not exist (404)."""
    try:
        jid = int(job_id)
    except ValueError:
        raise NotFound(f"job {job_id!r} not found") from None
    q = select(JobRow).where(JobRow.id == jid).options(selectinload(JobRow.allocations))
    if for_update:
        q = q.with_for_update()
    job = session.scalar(q)
    if job is None or (team is not None and job.team != team):
        raise NotFound(f"job {job_id!r} not found")
    fill_queue_positions(session, [job])
    return job


def encode_cursor(last_id: int) -> str:
    return base64.urlsafe_b64encode(f"id:{last_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        kind, value = raw.split(":", 1)
        if kind != "id":
            raise ValueError
        return int(value)
    except Exception:
        raise InputError(
            "malformed cursor (use next_cursor from a previous page)", "cursor"
        ) from None


def list_jobs(
    session: Session,
    *,
    team: str | None = None,
    pool: str | None = None,
    status: str | None = None,
    priority: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> tuple[list[JobRow], str | None]:
    """Newest first, keyset-paginated on the id (stable under inserts)."""
    if status is not None and status not in STATUSES:
        raise InputError(f"unknown status {status!r} (known: {', '.join(STATUSES)})", "status")
    q = select(JobRow).options(selectinload(JobRow.allocations)).order_by(JobRow.id.desc())
    if team is not None:
        q = q.where(JobRow.team == team)
    if pool is not None:
        q = q.where(JobRow.pool == pool)
    if status is not None:
        q = q.where(JobRow.status == status)
    if priority is not None:
        q = q.where(JobRow.priority == priority)
    if cursor:
        q = q.where(JobRow.id < decode_cursor(cursor))
    rows = list(session.scalars(q.limit(limit + 1)))
    fill_queue_positions(session, rows[:limit])
    next_cursor = encode_cursor(rows[limit - 1].id) if len(rows) > limit else None
    return rows[:limit], next_cursor


def cancel_job(session: Session, job: JobRow, *, now: datetime, by: str) -> None:
    """Cancel in the database; the dispatcher stops any pods (reconcile)."""
    if job.status not in CANCELLABLE:
        raise Conflict(f"job {job.id} is already {job.status}", "status")
    change_state(session, job, "cancelled", now=now, reason=f"cancelled by {by}")
    session.execute(text(f"NOTIFY {NOTIFY_CHANNEL}"))


def job_events(session: Session, job: JobRow) -> list[JobEventRow]:
    return list(
        session.scalars(
            select(JobEventRow).where(JobEventRow.job_id == job.id).order_by(JobEventRow.id)
        )
    )


def released_placements(session: Session, job: JobRow) -> list[dict]:
    """What a stopped job held: a finished job's from its last admission event
    (its allocation rows are gone), a requeued job's from its rows still
    releasing while its old pods stop (app/store/releasing.py)."""
    if job.allocations:
        return []
    if job.status not in TERMINAL:
        return [
            {
                "replica": r.replica,
                "node": r.node,
                "gpu_type": r.gpu_type,
                "gpus": [int(d) for d in r.devices] if not r.mig else [],
                "mig": [list(m) for m in r.mig],
                "units": r.units,
                "cpu": r.cpu,
                "memory_gb": r.memory_gb,
            }
            for r in session.scalars(
                select(AllocationRow)
                .where(AllocationRow.job_id == job.id, releasing_row())
                .order_by(AllocationRow.replica, AllocationRow.id)
            )
        ]
    ev = session.scalar(
        select(JobEventRow)
        .where(JobEventRow.job_id == job.id, JobEventRow.type == "admitted")
        .order_by(JobEventRow.id.desc())
        .limit(1)
    )
    return list((ev.data or {}).get("placements", [])) if ev else []


def leases_for(session: Session, jobs: list[JobRow]) -> dict[int, LeaseRow]:
    """The current (or last) lease of each job, in one query (for list pages)."""
    ids = [j.id for j in jobs]
    if not ids:
        return {}
    out: dict[int, LeaseRow] = {}
    for lease in session.scalars(
        select(LeaseRow).where(LeaseRow.job_id.in_(ids)).order_by(LeaseRow.id)
    ):
        cur = out.get(lease.job_id)
        if cur is None or cur.state != "active" or lease.state == "active":
            out[lease.job_id] = lease
    return out


def active_lease(session: Session, job: JobRow) -> LeaseRow | None:
    return session.scalar(
        select(LeaseRow)
        .where(LeaseRow.job_id == job.id)
        .order_by(LeaseRow.state != "active", LeaseRow.id.desc())
        .limit(1)
    )


def pending_queue(
    session: Session, *, pool: str | None = None, team: str | None = None
) -> list[JobRow]:
    """Pending jobs in the dispatch order of the last cycle (then by submit time)."""
    ranked = (
        text(
            "SELECT u.id AS job_id, u.ord AS ord FROM queue_order AS q, "
            "unnest(q.job_ids) WITH ORDINALITY AS u(id, ord) WHERE q.id = 1"
        )
        .columns(column("job_id", BigInteger), column("ord", BigInteger))
        .subquery("ranked")
    )
    q = (
        select(JobRow)
        .outerjoin(ranked, ranked.c.job_id == JobRow.id)
        .where(JobRow.status == "pending")
    )
    if pool:
        q = q.where(JobRow.pool == pool)
    if team:
        q = q.where(JobRow.team == team)
    q = q.order_by(ranked.c.ord.asc().nulls_last(), JobRow.submitted_at, JobRow.id)
    return list(session.scalars(q))
