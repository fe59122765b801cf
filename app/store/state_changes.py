"""Job state changes: one set-based path, for one job and for a batch alike.

The rules are data in :mod:`app.domain.states` (which changes are allowed,
which timestamps a status stamps or clears, which events count as a
preemption). :func:`apply_changes` turns any number of changes into a few
statements: one ``UPDATE`` of the jobs (the from-status, and optionally the
revision the caller saw, are checked in the statement, so a job that changed
meanwhile is left alone and not returned), the capacity of jobs that stop
holding it (allocations deleted, or marked releasing while their Pods stop:
app/store/releasing_rows.py; active leases ended), and one ``INSERT`` of the
events. :func:`change_state` is the same path for one ORM job (routes, the
dispatcher's per-job rules): it raises :class:`InvalidTransition` instead of
skipping, and refreshes the ORM object. Nothing here commits: the caller owns
the unit of work.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    BigInteger,
    Boolean,
    Connection,
    DateTime,
    Float,
    Integer,
    Row,
    String,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from app.domain.states import (
    ACTIVE,
    ALLOWED,
    PREEMPTION_EVENTS,
    STAMPED,
    STAMPS,
    InvalidTransition,
)
from app.scheduling.verdicts import stored_code
from app.store.orm import JobEventRow, JobRow
from app.store.runtime_history_rows import record_succeeded

# a declarative class's __table__ is a Table (SQLAlchemy types it FromClause, the
# general case of a class mapped to a select); insert_rows needs its typed columns
EVENTS = cast(Table, JobEventRow.__table__)


@dataclass(frozen=True)
class Change:
    """One job's state change. ``revision``: change it only if it is still at
    this revision (the snapshot's view); ``units``: the CU it now holds (an
    admission); ``prior_events``: (type, reason) of events recorded just before
    the change's own (an admission's lease warnings)."""

    job_id: int
    to_status: str
    reason: str | None = None
    event_type: str | None = None
    lease_state: str = "returned"  # what its active leases become if it stops holding capacity
    data: dict[str, Any] = field(default_factory=dict)
    pods_gone: bool = False  # the cluster reported the Pods ended: free capacity now
    revision: int | None = None
    units: float | None = None
    prior_events: tuple[tuple[str, str | None], ...] = ()


def _literal(values: Sequence[str]) -> str:
    return "ARRAY[" + ", ".join(f"'{v}'" for v in sorted(values)) + "]::text[]"


def _stamp(col: str) -> str:
    on = [s for s, (stamps, _) in STAMPS.items() if col in stamps]
    off = [s for s, (_, clears) in STAMPS.items() if col in clears]
    return (
        f"{col} = CASE WHEN v.to_status = ANY({_literal(on)}) THEN CAST(:now AS timestamptz) "
        f"WHEN v.to_status = ANY({_literal(off)}) THEN NULL ELSE j.{col} END"
    )


_ALLOWED_PAIRS = _literal([f"{a}>{b}" for a, tos in ALLOWED.items() for b in tos])
RETURNED = (
    "status", "revision", "reason", "reason_code", "units", "waited_s", "queued_at", *STAMPED,
    "queue_position", "preemption_count", "longest_attempt_s",
)
_UPDATE = text(
    f"""
    UPDATE jobs AS j SET
        status = v.to_status,
        waited_s = j.waited_s + CASE WHEN v.old = 'pending' AND j.queued_at IS NOT NULL
            THEN GREATEST(0, EXTRACT(EPOCH FROM (CAST(:now AS timestamptz) - j.queued_at)))
            ELSE 0 END,
        queued_at = CASE WHEN v.to_status = 'pending' THEN CAST(:now AS timestamptz)
            WHEN v.old = 'pending' THEN NULL ELSE j.queued_at END,
        {", ".join(_stamp(c) for c in STAMPED)},
        queue_position = CASE WHEN v.to_status = 'pending' THEN j.queue_position END,
        reason = v.reason,
        reason_code = v.reason_code,
        reason_start_at = NULL,  -- a new state's reason names no start (queue_order.py)
        units = COALESCE(v.units, j.units),
        -- a running job sent back to the queue ran that long without finishing:
        -- the longest such attempt is a lower bound on its run time (leases)
        longest_attempt_s = CASE WHEN v.old = 'running' AND v.to_status = 'pending'
            AND j.started_at IS NOT NULL
            THEN GREATEST(COALESCE(j.longest_attempt_s, 0),
                          EXTRACT(EPOCH FROM (CAST(:now AS timestamptz) - j.started_at)))
            ELSE j.longest_attempt_s END,
        preemption_count = j.preemption_count + CASE WHEN v.to_status = 'pending'
            AND v.old = ANY({_literal(sorted(ACTIVE))})
            AND v.event_type = ANY({_literal(sorted(PREEMPTION_EVENTS))}) THEN 1 ELSE 0 END,
        revision = nextval('job_revision_seq')
    FROM (
        SELECT o.id, o.status AS old, c.to_status, c.reason, c.reason_code, c.units,
            c.event_type
        FROM unnest(CAST(:ids AS bigint[]), CAST(:tos AS text[]), CAST(:reasons AS text[]),
                    CAST(:codes AS text[]), CAST(:revs AS bigint[]),
                    CAST(:units AS float8[]), CAST(:etypes AS text[]))
            AS c(id, to_status, reason, reason_code, rev, units, event_type)
        JOIN jobs AS o ON o.id = c.id
        WHERE (c.rev IS NULL OR o.revision = c.rev)
            AND (o.status || '>' || c.to_status) = ANY({_ALLOWED_PAIRS})
        ORDER BY o.id  -- rows are locked in id order by every writer: no lock cycles
        FOR UPDATE OF o
    ) AS v
    WHERE j.id = v.id
    RETURNING j.id, v.old, {", ".join(f"j.{c}" for c in RETURNED)}, j.name, j.team, j.pool,
        j.priority, j.spec -> 'duration_estimate_s' AS duration,
        j.spec -> 'time_limit_s' AS time_limit,
        j.spec -> 'pod_template' AS pod_template,
        j.spec -> 'labels' AS labels,
        j.spec -> 'resources' -> 'cpu' AS main_cpu,
        j.spec -> 'resources' -> 'memory_gb' AS main_memory_gb,
        j.submitted_by, j.idempotency_key
    """
)
_FREE = text(
    "DELETE FROM allocations WHERE job_id = ANY(CAST(:ids AS bigint[]))"
    " AND releasing_since IS NULL"  # live rows (store/live_allocations.py); older ones may drain
)
_MARK_RELEASING = text(
    "UPDATE allocations SET releasing_since = CAST(:now AS timestamptz)"
    " WHERE job_id = ANY(CAST(:ids AS bigint[])) AND releasing_since IS NULL"
)
_END_LEASES = text(
    """
    UPDATE leases AS l SET state = v.state, ended_at = CAST(:now AS timestamptz)
    FROM unnest(CAST(:ids AS bigint[]), CAST(:states AS text[])) AS v(id, state)
    WHERE l.job_id = v.id AND l.state = 'active'
    """
)


def apply_changes(conn: Connection, changes: Sequence[Change], now: datetime) -> dict[int, Row]:
    """Apply every allowed change (one per job) in a few statements; returns the
    changed jobs' rows (``old`` status, the new values of :data:`RETURNED`, and
    what a bind reads: name, team, pool, priority, duration, pod_template, labels, the
    main container's CPU and memory)."""
    by_id = {c.job_id: c for c in changes}
    if not by_id:
        return {}
    ids = sorted(by_id)
    cs = [by_id[i] for i in ids]
    rows = {
        r.id: r
        for r in conn.execute(
            _UPDATE,
            {
                "now": now,
                "ids": ids,
                "tos": [c.to_status for c in cs],
                "reasons": [c.reason for c in cs],
                "codes": [stored_code(c.reason) for c in cs],
                "revs": [c.revision for c in cs],
                "units": [c.units for c in cs],
                "etypes": [c.event_type for c in cs],
            },
        )
    }
    stopped = [i for i in sorted(rows) if rows[i].old in ACTIVE and rows[i].status not in ACTIVE]
    # a run that succeeded counts in its team's run-time history (the core's prediction)
    record_succeeded(conn, [rows[i] for i in stopped if rows[i].status == "succeeded"], now)
    gone = [i for i in stopped if by_id[i].pods_gone]
    draining = [i for i in stopped if not by_id[i].pods_gone]
    if gone:
        conn.execute(_FREE, {"ids": gone})
    if draining:
        conn.execute(_MARK_RELEASING, {"ids": draining, "now": now})
    if stopped:
        conn.execute(
            _END_LEASES,
            {"ids": stopped, "states": [by_id[i].lease_state for i in stopped], "now": now},
        )
    events: list[dict[str, Any]] = []
    for c in changes:  # in the caller's order
        r = rows.get(c.job_id)
        if r is None or by_id[c.job_id] is not c:
            continue
        for etype, why in c.prior_events:
            events.append(event_row(c.job_id, now, etype, None, r.old, why, {}))
        events.append(
            event_row(c.job_id, now, c.event_type or r.status, r.old, r.status, c.reason, c.data)
        )
    insert_rows(conn, EVENTS, events)
    return rows


def change_state(
    session: Session,
    job: JobRow,
    to_status: str,
    *,
    now: datetime,
    reason: str | None = None,
    event_type: str | None = None,
    lease_state: str = "returned",
    data: dict[str, Any] | None = None,
    pods_gone: bool = False,
    units: float | None = None,
) -> None:
    """Move ``job`` to ``to_status`` through :func:`apply_changes`; raise
    :class:`InvalidTransition` when the rules forbid it.

    ``event_type`` names the event when it is more specific than the new
    status (``preempted``, ``reclaimed``, ``bind_failed``, ``requeued``);
    ``lease_state`` is what the job's active leases become when it stops
    holding capacity (``reclaimed`` for a lease reclaim, else ``returned``);
    ``pods_gone`` says the cluster already reported the job's Pods ended, so
    its capacity is freed now rather than marked releasing.
    """
    if to_status not in ALLOWED.get(job.status, frozenset()):
        raise InvalidTransition(f"job {job.id}: cannot go from {job.status} to {to_status}")
    session.flush()  # the job and anything added for it are in the database first
    change = Change(
        job.id, to_status, reason=reason, event_type=event_type, lease_state=lease_state,
        data=data or {}, pods_gone=pods_gone, units=units,
    )
    row = apply_changes(session.connection(), [change], now).get(job.id)
    if row is None:
        raise InvalidTransition(
            f"job {job.id}: cannot go to {to_status}: it changed meanwhile"
        )
    for col in RETURNED:
        set_committed_value(job, col, getattr(row, col))
    session.expire(job, ["allocations"])


def wait_seconds(job: JobRow, now: datetime) -> float:
    """Closed pending periods plus the open one, if the job is pending now."""
    total = job.waited_s or 0.0
    if job.status == "pending" and job.queued_at is not None:
        total += max(0.0, (now - job.queued_at).total_seconds())
    return total


def event_row(
    job_id: int,
    at: datetime,
    type_: str,
    from_status: str | None,
    to_status: str | None,
    reason: str | None,
    data: dict[str, Any],
) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "at": at,
        "type": type_,
        "from_status": from_status,
        "to_status": to_status,
        "reason": reason,
        "reason_code": stored_code(reason),
        "data": data,
    }


_PG_TYPES = {
    BigInteger: "bigint",
    Integer: "integer",
    Float: "float8",
    String: "text",
    Text: "text",
    DateTime: "timestamptz",
    Boolean: "boolean",
    JSONB: "jsonb",
}


def insert_rows(conn: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
    """One ``INSERT ... SELECT FROM unnest(arrays)``: a parameter per column, not
    per value (a multi-row VALUES list with thousands of parameters costs more to
    build and parse than the insert itself)."""
    if not rows:
        return
    cols = list(rows[0])
    arrays, params = [], {}
    for i, name in enumerate(cols):
        pg = _PG_TYPES[type(table.c[name].type)]
        values = [r[name] for r in rows]
        if pg == "jsonb":  # sent as text, parsed by the server
            values = [json.dumps(v) for v in values]
            arrays.append(f"CAST(CAST(:c{i} AS text[]) AS jsonb[])")
        else:
            arrays.append(f"CAST(:c{i} AS {pg}[])")
        params[f"c{i}"] = values
    conn.execute(
        text(
            f"INSERT INTO {table.name} ({', '.join(cols)}) "
            f"SELECT * FROM unnest({', '.join(arrays)})"
        ),
        params,
    )
