"""Admissions as a batch: a pass's ``pending -> admitted`` in a few statements.

The state change itself goes through :func:`app.store.state_changes.apply_changes`
(the one path for every transition, one job or many); this module adds what
an admission writes besides: its allocations and leases, and the event data
that keeps its placements after the allocation rows are gone.

Races are detected in the statements themselves: a job is admitted only if
it is still pending at the revision the caller saw; only the admitted jobs
get allocations and leases. Nothing here commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Connection, Table

from app.clock import from_epoch
from app.scheduling.model import Admission
from app.store.orm import AllocationRow, LeaseRow
from app.store.state_changes import Change, apply_changes, insert_rows

# declarative __table__s are Tables (typed FromClause by SQLAlchemy): see states.EVENTS
ALLOCATIONS = cast(Table, AllocationRow.__table__)
LEASES = cast(Table, LeaseRow.__table__)


@dataclass(frozen=True)
class AdmittedRow:
    id: int
    name: str
    team: str
    pool: str
    priority: str
    spec: dict[str, Any]
    submitted_by: str | None = None  # with idempotency_key: the workload it came from
    idempotency_key: str | None = None
    revision: int = 0  # the job's revision once admitted: names the bind attempt


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
    by_id = {int(a.job_id): a for a, _ in admissions}
    changes = [
        Change(
            int(a.job_id),
            "admitted",
            revision=rev,
            units=a.units,
            data=admission_event_data(a),
            prior_events=tuple(("lease_warning", note) for note in a.notes),
        )
        for a, rev in admissions
    ]
    rows = apply_changes(conn, changes, now)
    admitted = {
        # only what a bind reads of the spec (the whole spec is the largest column)
        r.id: AdmittedRow(r.id, r.name, r.team, r.pool, r.priority, _bind_spec(r),
                          r.submitted_by, r.idempotency_key, r.revision)
        for r in rows.values()
    }
    allocations: list[dict[str, Any]] = []
    leases: list[dict[str, Any]] = []
    for job_id in sorted(admitted):
        a = by_id[job_id]
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
    insert_rows(conn, ALLOCATIONS, allocations)
    insert_rows(conn, LEASES, leases)
    return admitted


def _bind_spec(r: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if r.duration is not None:
        spec["duration_estimate_s"] = r.duration
    if r.time_limit is not None:
        spec["time_limit_s"] = r.time_limit
    if r.pod_template is not None:
        spec["pod_template"] = r.pod_template
    if r.labels:  # the job's labels go on its Pods
        spec["labels"] = r.labels
    main = {k: v for k, v in (("cpu", r.main_cpu), ("memory_gb", r.main_memory_gb))
            if v is not None}
    if main:
        spec["resources"] = main
    return spec
