"""Job rows: submit (with reference checks and idempotency), read, list, cancel.

Functions here flush but never commit; the route or loop that calls them
owns the unit of work.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, func, select, text
from sqlalchemy.orm import Session, selectinload

from app.domain.config import above_max_priority
from app.domain.errors import Conflict, InputError, NotFound, PodPolicyError, unknown
from app.domain.pod_policy import (
    InstallPolicy,
    PodPolicy,
    Violation,
    check_template,
    token_violations,
)
from app.domain.pod_resources import template_violations
from app.domain.spec import JobSpec, job_id_number
from app.domain.states import CANCELLABLE, STATUSES, TERMINAL
from app.store.catalog_cache import (
    CatalogView,
    NameRef,
    PriorityRef,
    TeamRef,
    cached_catalog,
    current_catalog,
    current_catalog_of,
)
from app.store.catalog_feasibility import check_feasible
from app.store.orm import (
    AllocationRow,
    JobEventRow,
    JobRow,
    LeaseRow,
    releasing_row,
)
from app.store.queue_order import fill_queue_positions
from app.store.state_changes import change_state
from app.store.team_limits import ROOM_SQL, check_pending_cap, effective_cap, over_cap

NOTIFY_CHANNEL = "gpuq_jobs"
MAX_LIMIT = 500


@dataclass(frozen=True)
class Submitted:
    job: JobRow
    created: bool


def _session(session: Session | None) -> Session:
    if session is None:
        raise ValueError("pass a session or a catalog")
    return session


#: fields added to the job spec after jobs were stored with an idempotency key: left out
#: of the hash while unset, so a retried submission still matches its stored hash
_LATER_FIELDS = ("time_limit_s",)


def spec_hash(spec: JobSpec) -> str:
    body = spec.model_dump(mode="json")
    for k in _LATER_FIELDS:
        if body.get(k) is None:
            body.pop(k, None)
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _template_violations(template: Mapping[str, Any], policy: PodPolicy, spec: JobSpec,
                         where: str = "pod_template") -> list[Violation]:
    """The Pod policy's violations of ``template``; when none, what it asks that gpuq
    would contradict or ignore (requests, limits, node selection): refused now, not a
    Pod the apiserver or kubelet refuses."""
    violations = check_template(template, policy, where)
    if violations:
        return violations
    return [Violation(p, m) for p, m in template_violations(
        template, spec.resources.cpu, spec.resources.memory_gb, where)]


def check_pod_sets(
    session: Session,
    spec: JobSpec,
    templates: Sequence[tuple[str, Mapping[str, Any]]],
    install: InstallPolicy | None = None,
) -> None:
    """The team's Pod policy over each pod set's template of a workload (a PyTorchJob's
    master and workers, a JobSet's replicated Jobs): :class:`PodPolicyError` with paths
    ``pod_template[<pod set>]...``. ``spec.pod_template`` is only the first set's; the
    others run Pods on the same nodes, so one of them asking for every card (a device
    variable, a RuntimeClass) would pass unseen. The workload's controller, not gpuq,
    makes the Pods, so each template must also refuse the token (``token_violations``)."""
    if not templates:
        return
    cat = current_catalog(session)
    team = cat.teams.get(spec.team)
    if team is None:
        raise InputError(unknown("team", spec.team, cat.teams), "team")
    policy = cat.pod_policy(team, install or InstallPolicy())
    out: list[Violation] = []
    for name, template in templates:
        where = f"pod_template[{name}]"
        out += _template_violations(template, policy, spec, where)
        out += token_violations(template, policy, where)
    if out:
        raise PodPolicyError(out)


def resolve_references(
    session: Session | None,
    spec: JobSpec,
    catalog: CatalogView | None = None,
    install: InstallPolicy | None = None,
) -> tuple[TeamRef, NameRef, PriorityRef]:
    """Team, pool and priority of a spec; every unknown name is an :class:`InputError`,
    a ``pod_template`` the team's Pod policy refuses is one naming the field path
    (app/domain/pod_policy.py).

    Checked against the cached catalog (:mod:`app.store.catalog_cache`); the
    foreign keys of ``jobs`` still guard the insert itself.
    """
    cat = catalog or current_catalog(_session(session))
    team = cat.teams.get(spec.team)
    if team is None:
        raise InputError(unknown("team", spec.team, cat.teams), "team")
    if spec.pod_template:
        violations = _template_violations(
            spec.pod_template, cat.pod_policy(team, install or InstallPolicy()), spec)
        if violations:
            raise PodPolicyError(violations)
    pool_name = spec.pool or team.pool
    pool = cat.pools.get(pool_name)
    if pool is None:
        raise InputError(unknown("pool", pool_name, cat.pools), "pool")
    if pool_name != team.pool and pool_name not in team.allowed_pools:
        allowed = ", ".join([team.pool, *team.allowed_pools])
        raise InputError(
            f"team {team.name} may not use pool {pool_name!r} (allowed: {allowed})", "pool"
        )
    prio_name = spec.priority or team.default_priority
    prio = cat.priorities.get(prio_name)
    if prio is None:
        raise InputError(unknown("priority class", prio_name, cat.priorities), "priority")
    if team.max_priority is not None:
        values = {p.name: p.value for p in cat.priorities.values()}
        why = above_max_priority(team.name, prio_name, values, team.max_priority)
        if why is not None:
            raise InputError(why, "priority")
    r = spec.resources
    types = cat.types
    for fld, names in (
        ("resources.gpu_types", r.gpu_types),
        ("resources.avoid_gpu_types", r.avoid_gpu_types),
    ):
        for n in names:
            if n not in types:
                raise InputError(unknown("GPU type", n, types), fld)
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
    session: Session | None, spec: JobSpec, catalog: CatalogView | None = None
) -> float | None:
    """CU a pending job asks for, when the spec pins it down."""
    r = spec.resources
    if r.gpu_units is not None:
        return r.gpu_units
    if r.gpus is not None and r.gpus == 0:
        return 0.0
    if r.gpus is not None and len(r.gpu_types) == 1:
        t = (catalog or current_catalog(_session(session))).types.get(r.gpu_types[0])
        return t.weight * r.gpus * spec.replica_count if t else None
    return None


# One job, its ``submitted`` event and the dispatcher's wake-up in one statement, and
# only while the catalog is still at the revision the spec was checked against
# (the foreign keys guard the names; this guards pools a team may use, types, ...),
# and only while the team has room under its cap on pending jobs (:cap, NULL: none;
# app/store/team_limits.py). A repeated Idempotency-Key inserts nothing (ON CONFLICT).
# The row always comes back with the current catalog revision and whether the team was
# full, so a miss says which it was.
_INSERT_ONE = text(
    f"""
    WITH ok AS (SELECT 1 FROM catalog_revision WHERE id = 1 AND revision = :rev),
    room AS (SELECT {ROOM_SQL} AS yes),
    j AS (
        INSERT INTO jobs (name, team, pool, priority, status, spec, units, submitted_at,
            queued_at, waited_s, preemption_count, idempotency_key, idempotency_hash,
            submitted_by)
        SELECT :name, :team, :pool, :priority, 'pending', CAST(:spec AS jsonb), :units,
            :now, :now, 0, 0, :key, :hash, :by
        FROM ok, room WHERE room.yes
        ON CONFLICT ON CONSTRAINT uq_jobs_team_idempotency_key DO NOTHING
        RETURNING id
    ),
    e AS (
        INSERT INTO job_events (job_id, at, type, from_status, to_status, reason, data)
        SELECT id, :now, 'submitted', NULL, 'pending', NULL,
            jsonb_strip_nulls(jsonb_build_object('submitted_by', CAST(:by AS text))) FROM j
    )
    SELECT r.revision, j.id, n.sent, (SELECT NOT yes FROM room) AS full
    FROM catalog_revision AS r
    LEFT JOIN j ON TRUE
    LEFT JOIN LATERAL (SELECT pg_notify('{NOTIFY_CHANNEL}', '') IS NULL AS sent FROM j) AS n
        ON TRUE
    WHERE r.id = 1
    """
)

# Many jobs as one JSON array parameter (not one placeholder per value: a 500-job body
# used to be ~8,500 placeholders that psycopg re-parsed on every request; nor text[]
# arrays, whose per-element quoting in Python cost more than the insert). Ids come back
# in the order of the array: the identity is drawn in insertion order, which follows
# the ordinality.
_INSERT_MANY = text(
    f"""
    WITH v AS (
        SELECT x.k, x.r ->> 'name' AS name, x.r ->> 'team' AS team, x.r ->> 'pool' AS pool,
            x.r ->> 'priority' AS priority, x.r -> 'spec' AS spec,
            CAST(x.r ->> 'units' AS float8) AS units
        FROM jsonb_array_elements(CAST(:rows AS jsonb)) WITH ORDINALITY AS x(r, k)
    ),
    j AS (
        INSERT INTO jobs (name, team, pool, priority, status, spec, units, submitted_at,
            queued_at, waited_s, preemption_count, submitted_by)
        SELECT name, team, pool, priority, 'pending', spec, units, :now, :now, 0, 0, :by
        FROM v ORDER BY k
        RETURNING id
    ),
    e AS (
        INSERT INTO job_events (job_id, at, type, from_status, to_status, reason, data)
        SELECT id, :now, 'submitted', NULL, 'pending', NULL,
            jsonb_strip_nulls(jsonb_build_object('submitted_by', CAST(:by AS text))) FROM j
    )
    SELECT j.id FROM j, (SELECT pg_notify('{NOTIFY_CHANNEL}', '')) AS n ORDER BY j.id
    """
)


@dataclass(frozen=True)
class NewJob:
    """What a submit wrote: enough to answer without reading the row back."""

    id: int
    team: str
    pool: str
    priority: str
    units: float | None
    spec: dict
    submitted_at: datetime
    submitted_by: str | None = None


def insert_job(
    conn: Connection,
    spec: JobSpec,
    *,
    now: datetime,
    idempotency_key: str | None = None,
    submitted_by: str | None = None,
    install: InstallPolicy | None = None,
    at_revision: int | None = None,
    pending_cap: int | None = None,
) -> NewJob | int | None:
    """Submit one job in one round trip: checks against the cached catalog, then
    one INSERT ... RETURNING that also writes the event and the NOTIFY.

    Returns the :class:`NewJob`, or - for an ``Idempotency-Key`` this team used
    before with the same body - the id of the job it created then (a different
    body is a :class:`Conflict`). With ``conn`` in autocommit the statement is
    its own transaction; inside a transaction it joins it.

    ``at_revision``: write only while ``catalog_revision`` is still this number (the
    revision a cached principal was resolved at), else write nothing and return None
    without any other read: the caller then resolves the principal afresh. A spec
    the cached catalog refuses also returns None (the fresh path gives the 4xx).

    ``pending_cap``: hold the team to its cap on pending jobs, this being the install's
    default (``GPUQ_TEAM_MAX_PENDING``; the team's ``max_pending`` wins, 0 = none) -
    a :class:`~app.domain.errors.TooManyRequests` when full. None: no cap (an admin's
    submit). Checked in the INSERT itself, against the team's cap at the revision the
    INSERT is guarded by.
    """
    h = spec_hash(spec) if idempotency_key is not None else None
    catalog = cached_catalog(conn.engine)
    if at_revision is not None and (catalog is None or catalog.revision != at_revision):
        return None
    fresh = catalog is None  # checked against the database in this call
    if catalog is None:
        catalog = current_catalog_of(conn)
    body = spec.model_dump(mode="json", exclude_none=True)
    for _attempt in range(3):
        try:
            team, pool, prio = resolve_references(None, spec, catalog, install)
        except InputError:
            if fresh:
                raise
            if at_revision is not None:
                return None
            catalog, fresh = current_catalog_of(conn), True  # refused by a stale cache?
            continue
        try:
            check_feasible(conn, spec, catalog, team, pool.name, prio.name, now)
        except InputError:
            if at_revision is not None:
                return None  # the fresh path gives the 422 (after 401/403, as ever)
            raise
        units = requested_units(None, spec, catalog)
        cap = (effective_cap(team.max_pending, pending_cap)
               if pending_cap is not None else None)
        row = conn.execute(
            _INSERT_ONE,
            {
                "cap": cap,
                "adding": 1,
                "rev": catalog.revision,
                "name": spec.name,
                "team": team.name,
                "pool": pool.name,
                "priority": prio.name,
                "spec": json.dumps(body),
                "units": units,
                "now": now,
                "key": idempotency_key,
                "hash": h,
                "by": submitted_by,
            },
        ).one()
        if row.id is not None:
            return NewJob(
                row.id, team.name, pool.name, prio.name, units, body, now, submitted_by
            )
        if row.revision == catalog.revision:  # the key was used before, or no room
            existing = conn.execute(
                select(JobRow.id, JobRow.idempotency_hash).where(
                    JobRow.team == spec.team, JobRow.idempotency_key == idempotency_key
                )
            ).one_or_none() if idempotency_key is not None else None
            if existing is None:
                assert row.full and cap is not None
                raise over_cap(team.name, cap)
            if existing.idempotency_hash != h:
                raise Conflict(
                    "this key was already used with a different job body", "Idempotency-Key"
                )
            return int(existing.id)
        if at_revision is not None:
            return None
        catalog, fresh = current_catalog_of(conn), True  # the catalog moved: check again
    raise Conflict("the catalog kept changing during the submit; try again")


def submit_job(
    session: Session,
    spec: JobSpec,
    *,
    now: datetime,
    idempotency_key: str | None = None,
    submitted_by: str | None = None,
    install: InstallPolicy | None = None,
) -> Submitted:
    """:func:`insert_job` in the session's transaction, the job read back as a row
    (for callers that go on with the ORM object)."""
    got = insert_job(
        session.connection(),
        spec,
        now=now,
        idempotency_key=idempotency_key,
        submitted_by=submitted_by,
        install=install,
    )
    assert got is not None  # only an ``at_revision`` write gives up
    job_id = got.id if isinstance(got, NewJob) else got
    job = session.scalar(
        select(JobRow).where(JobRow.id == job_id).options(selectinload(JobRow.allocations))
    )
    assert job is not None
    return Submitted(job, isinstance(got, NewJob))


def submit_jobs(
    session: Session,
    specs: list[JobSpec],
    *,
    now: datetime,
    submitted_by: str | None = None,
    install: InstallPolicy | None = None,
    pending_cap: int | None = None,
) -> list[int]:
    """Insert many pending jobs in one statement (jobs, their ``submitted`` events,
    one NOTIFY). All or nothing: the first bad spec is an :class:`InputError` naming
    its index, and nothing is inserted. ``pending_cap`` as in :func:`insert_job`: each
    team of the batch must have room for all of its jobs."""
    if not specs:
        return []
    conn = session.connection()
    catalog = current_catalog_of(conn)
    rows: list[dict[str, Any]] = []  # the jobs table's columns
    for i, spec in enumerate(specs):
        try:
            team, pool, prio = resolve_references(None, spec, catalog, install)
            check_feasible(conn, spec, catalog, team, pool.name, prio.name, now)
        except InputError as e:
            msg = e.detail.split(": ", 1)[1] if e.field else e.detail
            raise InputError(msg, f"jobs[{i}].{e.field}" if e.field else f"jobs[{i}]") from None
        rows.append(
            {
                "name": spec.name,
                "team": team.name,
                "pool": pool.name,
                "priority": prio.name,
                "spec": spec.model_dump(mode="json", exclude_none=True),
                "units": requested_units(None, spec, catalog),
            }
        )
    if pending_cap is not None:
        per_team: dict[str, int] = {}
        for r in rows:
            per_team[r["team"]] = per_team.get(r["team"], 0) + 1
        for name, n in per_team.items():
            cap = effective_cap(catalog.teams[name].max_pending, pending_cap)
            check_pending_cap(conn, name, n, cap)
    params = {"rows": json.dumps(rows), "now": now, "by": submitted_by}
    return list(conn.execute(_INSERT_MANY, params).scalars())


def get_job(
    session: Session, job_id: str, *, team: str | None = None, for_update: bool = False
) -> JobRow:
    """One job; with ``team``, a job of another team does not exist (404): the team is
    part of the query, so such a job is neither read nor locked (a cancel of another
    team's job waited on its row lock while the dispatcher held it)."""
    jid = job_id_number(job_id)
    if jid is None:
        raise NotFound(f"job {job_id!r} not found")
    q = select(JobRow).where(JobRow.id == jid).options(selectinload(JobRow.allocations))
    if team is not None:
        q = q.where(JobRow.team == team)
    if for_update:
        q = q.with_for_update()
    job = session.scalar(q)
    if job is None:
        raise NotFound(f"job {job_id!r} not found")
    fill_queue_positions(session, [job])
    return job


def encode_cursor(last_id: int) -> str:
    return base64.urlsafe_b64encode(f"id:{last_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        kind, value = raw.split(":", 1)
        n = job_id_number(value)  # what next_cursor holds: a job id (a bigint)
        if kind != "id" or n is None:
            raise ValueError
        return n
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
    releasing while its old pods stop (app/store/releasing_rows.py)."""
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


def pending_count_of_others(session: Session, *, team: str, pool: str | None = None) -> int:
    """Pending jobs of teams other than ``team`` (in ``pool`` when given): what a
    team token's view of the queue counts but does not show."""
    q = select(func.count()).select_from(JobRow).where(
        JobRow.status == "pending", JobRow.team != team
    )
    if pool:
        q = q.where(JobRow.pool == pool)
    return int(session.scalar(q) or 0)
