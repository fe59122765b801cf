"""The hot state changes of a dispatcher pass, as set-based statements.

:func:`app.store.states.change_state` is the one place that defines what
a transition does. Going through it row by row (ORM objects, one event
object each) costs more than the scheduling itself when a pass admits
hundreds of jobs, so the three transitions every job makes on its way -
``pending -> admitted``, ``admitted -> running``, ``admitted|running ->
succeeded|failed`` - are also written here as a few statements for the
whole batch, applying the SAME rules (allowed transition, wait accounting,
timestamps, releasing capacity, queue fields, a new revision, the event).
``tests/integration/test_batch_states.py`` checks both paths leave
identical rows.

Races are detected in the statements themselves: a row is changed only if
it is still in the expected status (and, for admissions, at the revision
the snapshot saw); the ids that were changed are returned, and only those
get allocations, leases and events. Nothing here commits.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Connection,
    DateTime,
    Float,
    Integer,
    String,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session

from app.clock import from_epoch
from app.scheduling.model import Admission
from app.store.orm import AllocationRow, JobEventRow, JobRow, LeaseRow
from app.store.states import change_state, record_event

ALLOCATIONS = AllocationRow.__table__
EVENTS = JobEventRow.__table__
LEASES = LeaseRow.__table__

_ADMIT = text(
    """
    UPDATE jobs AS j SET
        status = 'admitted',
        waited_s = j.waited_s + CASE WHEN j.queued_at IS NULL THEN 0
            ELSE GREATEST(0, EXTRACT(EPOCH FROM (:now - j.queued_at))) END,
        queued_at = NULL,
        admitted_at = :now,
        started_at = NULL,
        queue_position = NULL,
        reason = NULL,
        units = v.units,
        revision = nextval('job_revision_seq')
    FROM unnest(CAST(:ids AS bigint[]), CAST(:revs AS bigint[]), CAST(:units AS float8[]))
        AS v(id, rev, units)
    WHERE j.id = v.id AND j.revision = v.rev AND j.status = 'pending'
    RETURNING j.id, j.name, j.team, j.pool, j.priority,
        j.spec -> 'duration_estimate_s' AS duration, j.spec -> 'pod_template' AS pod_template
    """
)

_RUNNING = text(
    """
    UPDATE jobs SET status = 'running', started_at = :now, queue_position = NULL,
        reason = NULL, revision = nextval('job_revision_seq')
    WHERE id = ANY(CAST(:ids AS bigint[])) AND status = 'admitted'
    RETURNING id
    """
)

_FINISH = text(
    """
    UPDATE jobs AS j SET status = v.phase, finished_at = :now, queue_position = NULL,
        reason = v.message, revision = nextval('job_revision_seq')
    FROM (
        SELECT o.id, o.status AS old, e.phase, e.message
        FROM unnest(CAST(:ids AS bigint[]), CAST(:phases AS text[]), CAST(:messages AS text[]))
            AS e(id, phase, message)
        JOIN jobs AS o ON o.id = e.id
        WHERE o.status IN ('admitted', 'running')
        FOR UPDATE OF o
    ) AS v
    WHERE j.id = v.id
    RETURNING j.id, v.old, v.phase, v.message
    """
)


@dataclass(frozen=True)
class AdmittedRow:
    id: int
    name: str
    team: str
    pool: str
    priority: str
    spec: dict[str, Any]


def admission_event_data(a: Admission) -> dict[str, Any]:
    """What the ``admitted`` event keeps (the placements outlive the allocation rows)."""
    return {
        "nodes": sorted({p.node for p in a.placements}),
        "units": a.units,
        "leases": len(a.leases),
        "placements": [
            {
                "replica": p.replica,
                "node": p.node,
                "gpu_type": p.gpu_type,
                "gpus": list(p.devices) if not p.mig else [],
                "mig": [list(m) for m in p.mig],
                "units": p.units,
                "cpu": p.cpu,
                "memory_gb": p.memory_gb,
            }
            for p in a.placements
        ],
    }


def admit_many(
    conn: Connection, admissions: Sequence[tuple[Admission, int]], now: datetime
) -> dict[int, AdmittedRow]:
    """``pending -> admitted`` for every (admission, revision seen) still at that
    revision; writes their allocations, leases and events. Returns the admitted rows."""
    if not admissions:
        return {}
    by_id = {int(a.job_id): (a, rev) for a, rev in admissions}
    ids = sorted(by_id)
    rows = conn.execute(
        _ADMIT,
        {
            "now": now,
            "ids": ids,
            "revs": [by_id[i][1] for i in ids],
            "units": [by_id[i][0].units for i in ids],
        },
    ).all()
    admitted = {
        # only what a bind reads of the spec (the whole spec is the largest column)
        r.id: AdmittedRow(r.id, r.name, r.team, r.pool, r.priority, _bind_spec(r))
        for r in rows
    }
    allocations: list[dict[str, Any]] = []
    leases: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    for job_id in sorted(admitted):
        a, _ = by_id[job_id]
        pool = admitted[job_id].pool
        for p in a.placements:
            allocations.append(
                {
                    "job_id": job_id,
                    "replica": p.replica,
                    "node": p.node,
                    "gpu_type": p.gpu_type,
                    "devices": list(p.devices),
                    "mig": [list(m) for m in p.mig],
                    "share": p.share,
                    "share_memory_gb": p.share_memory_gb,
                    "units": p.units,
                    "cpu": p.cpu,
                    "memory_gb": p.memory_gb,
                    "pool": pool,
                }
            )
        for g in a.leases:
            leases.append(
                {
                    "borrower": g.borrower,
                    "lender": g.lender,
                    "gpu_type": g.gpu_type,
                    "units": g.units,
                    "job_id": job_id,
                    "started_at": now,
                    "expires_at": from_epoch(g.expires_at),
                    "ended_at": None,
                    "state": "active",
                }
            )
        for note in a.notes:  # recorded before the change, as record_event would
            events.append(_event(job_id, now, "lease_warning", None, "pending", note, {}))
        events.append(
            _event(job_id, now, "admitted", "pending", "admitted", None, admission_event_data(a))
        )
    _insert(conn, ALLOCATIONS, allocations)
    _insert(conn, LEASES, leases)
    _insert(conn, EVENTS, events)
    return admitted


def admit_one(session: Session, job: JobRow, a: Admission, now: datetime) -> None:
    """``pending -> admitted`` for one locked job through :func:`change_state`
    (a job preempted and admitted anew in the same transaction, which the
    batch's revision check would refuse): its allocations, leases, notes."""
    for p in a.placements:
        session.add(
            AllocationRow(
                job_id=job.id,
                replica=p.replica,
                node=p.node,
                gpu_type=p.gpu_type,
                devices=list(p.devices),
                mig=[list(m) for m in p.mig],
                share=p.share,
                share_memory_gb=p.share_memory_gb,
                units=p.units,
                cpu=p.cpu,
                memory_gb=p.memory_gb,
                pool=job.pool,
            )
        )
    for g in a.leases:
        session.add(
            LeaseRow(
                borrower=g.borrower,
                lender=g.lender,
                gpu_type=g.gpu_type,
                units=g.units,
                job_id=job.id,
                started_at=now,
                expires_at=from_epoch(g.expires_at),
                state="active",
            )
        )
    job.units = a.units
    for note in a.notes:  # e.g. "duration_estimate_s outlasts its lease"
        record_event(session, job, "lease_warning", now=now, reason=note)
    change_state(session, job, "admitted", now=now, data=admission_event_data(a))


def _bind_spec(r: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if r.duration is not None:
        spec["duration_estimate_s"] = r.duration
    if r.pod_template is not None:
        spec["pod_template"] = r.pod_template
    return spec


def mark_running(conn: Connection, job_ids: Iterable[int], now: datetime) -> set[int]:
    """``admitted -> running`` for the jobs still admitted; returns those changed."""
    ids = sorted(set(job_ids))
    if not ids:
        return set()
    changed = {r.id for r in conn.execute(_RUNNING, {"now": now, "ids": ids})}
    _insert(
        conn,
        EVENTS,
        [_event(i, now, "running", "admitted", "running", None, {}) for i in sorted(changed)],
    )
    return changed


def finish_many(
    conn: Connection, outcomes: dict[int, tuple[str, str | None]], now: datetime
) -> set[int]:
    """``admitted|running -> succeeded|failed`` (job id -> (phase, message)); frees
    allocations and returns leases. Returns the jobs changed."""
    if not outcomes:
        return set()
    ids = sorted(outcomes)
    rows = conn.execute(
        _FINISH,
        {
            "now": now,
            "ids": ids,
            "phases": [outcomes[i][0] for i in ids],
            "messages": [outcomes[i][1] for i in ids],
        },
    ).all()
    done = sorted(r.id for r in rows)
    if done:
        conn.execute(
            text(
                "DELETE FROM allocations WHERE job_id = ANY(CAST(:ids AS bigint[]))"
                " AND releasing_since IS NULL"  # an older attempt's rows may still drain
            ),
            {"ids": done},
        )
        conn.execute(
            text(
                "UPDATE leases SET state = 'returned', ended_at = :now "
                "WHERE job_id = ANY(CAST(:ids AS bigint[])) AND state = 'active'"
            ),
            {"ids": done, "now": now},
        )
    _insert(
        conn,
        EVENTS,
        [_event(r.id, now, r.phase, r.old, r.phase, r.message, {}) for r in sorted(rows)],
    )
    return set(done)


def _event(
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


def _insert(conn: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
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
