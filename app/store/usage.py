"""Read models for usage endpoints: what pools, teams and nodes hold now.

Counted in CU from allocation rows; borrowed/lent from active lease rows.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from app.domain.states import ACTIVE
from app.store.orm import AllocationRow, JobRow, LeaseRow, NodeRow, PoolRow, TeamRow
from app.store.pool_ledger import ledger_from_db


def pool_usage(session: Session, pool: PoolRow) -> dict[str, Any]:
    used: dict[str, float] = defaultdict(float)
    for gpu_type, units in session.execute(
        select(AllocationRow.gpu_type, func.sum(AllocationRow.units))
        .join(JobRow, JobRow.id == AllocationRow.job_id)
        .where(AllocationRow.releasing_since.is_(None))  # live rows only
        .where(JobRow.pool == pool.name, JobRow.status.in_(ACTIVE))
        .group_by(AllocationRow.gpu_type)
    ):
        if gpu_type is not None:
            used[gpu_type] += float(units or 0)
    borrowed: dict[str, float] = defaultdict(float)
    lent: dict[str, float] = defaultdict(float)
    for lease in session.scalars(
        select(LeaseRow).where(
            LeaseRow.state == "active",
            (LeaseRow.borrower == pool.name) | (LeaseRow.lender == pool.name),
        )
    ):
        if lease.borrower == pool.name:
            borrowed[lease.gpu_type] += lease.units
        if lease.lender == pool.name:
            lent[lease.gpu_type] += lease.units
    types = list(
        dict.fromkeys([*(pool.gpu_types or []), *(pool.guaranteed or {}), *used, *borrowed, *lent])
    )
    by_type = {
        t: {
            "guaranteed": float((pool.guaranteed or {}).get(t, 0.0)),
            "used": used.get(t, 0.0),
            "borrowed": borrowed.get(t, 0.0),
            "lent": lent.get(t, 0.0),
        }
        for t in types
    }

    ledger = ledger_from_db(session)
    for t, row in by_type.items():
        # the scheduler's view: guarantee after scaling to capacity, idle, shared use
        row["guaranteed_effective"] = ledger.guarantee(pool.name, t)
        row["idle"] = ledger.idle(pool.name, t)
        row["shared"] = ledger.shared_used(pool.name, t)
        row["lendable"] = ledger.lendable(pool.name, t)
    active_leases = [
        {"id": str(r.id), "borrower": r.borrower, "lender": r.lender, "gpu_type": r.gpu_type,
         "units": r.units, "job_id": str(r.job_id), "started_at": r.started_at,
         "expires_at": r.expires_at, "state": r.state}
        for r in session.scalars(
            select(LeaseRow)
            .where(LeaseRow.state == "active",
                   (LeaseRow.borrower == pool.name) | (LeaseRow.lender == pool.name))
            .order_by(LeaseRow.id)
        )
    ]
    pending = session.scalar(
        select(func.count()).where(JobRow.pool == pool.name, JobRow.status == "pending")
    )
    total = {
        k: sum(v[k] for v in by_type.values()) for k in ("guaranteed", "used", "borrowed", "lent")
    }
    return {
        "pool": pool.name, "gpu_types": by_type, "total": total, "pending": int(pending or 0),
        "leases": active_leases,
    }


def team_usage(session: Session, team: TeamRow) -> dict[str, Any]:
    by_type: dict[str, float] = defaultdict(float)
    for gpu_type, units in session.execute(
        select(AllocationRow.gpu_type, func.sum(AllocationRow.units))
        .join(JobRow, JobRow.id == AllocationRow.job_id)
        .where(AllocationRow.releasing_since.is_(None))  # live rows only
        .where(JobRow.team == team.name, JobRow.status.in_(ACTIVE))
        .group_by(AllocationRow.gpu_type)
    ):
        if gpu_type is not None:  # CPU-only work holds no CU
            by_type[gpu_type] += float(units or 0)
    counts = dict(
        session.execute(
            select(JobRow.status, func.count())
            .where(JobRow.team == team.name)
            .group_by(JobRow.status)
        ).all()
    )
    used = sum(by_type.values())
    return {
        "team": team.name,
        "quota_units": team.quota_units,
        "quota_by_type": dict(team.quota_by_type or {}),
        "used_units": used,
        "used_by_type": dict(by_type),
        "pending": int(counts.get("pending", 0)),
        "admitted": int(counts.get("admitted", 0)),
        "running": int(counts.get("running", 0)),
    }


def node_allocations(session: Session) -> dict[str, list[AllocationRow]]:
    """Live allocations of running jobs and releasing ones (the cards of stopped
    jobs whose pods are still terminating are not free either)."""
    out: dict[str, list[AllocationRow]] = defaultdict(list)
    for a in session.scalars(
        select(AllocationRow)
        .join(JobRow, JobRow.id == AllocationRow.job_id)
        .where(
            or_(
                and_(AllocationRow.releasing_since.is_(None), JobRow.status.in_(ACTIVE)),
                AllocationRow.releasing_since.is_not(None),
            )
        )
        .order_by(AllocationRow.node, AllocationRow.id)
    ):
        out[a.node].append(a)
    return out


def node_view(node: NodeRow, allocs: list[AllocationRow]) -> dict[str, Any]:
    """A node with what is free on it: whole GPUs, MIG slices, CPU, memory."""
    layout = {int(k): list(v) for k, v in (node.mig_layout or {}).items()}
    used_whole: set[int] = set()
    used_slices: set[tuple[int, int]] = set()
    shared: dict[int, float] = defaultdict(float)
    cpu = mem = 0.0
    for a in allocs:
        cpu += a.cpu
        mem += a.memory_gb
        if a.mig:
            used_slices.update((int(d), int(i)) for d, i, _p in a.mig)
        elif a.share > 0 and a.devices:
            shared[int(a.devices[0])] += a.share
        else:
            used_whole.update(int(d) for d in a.devices)
    free_gpus = [
        d for d in range(node.gpus) if d not in layout and d not in used_whole and d not in shared
    ]
    free_slices = [
        {"device": d, "index": i, "profile": p}
        for d, profiles in layout.items()
        for i, p in enumerate(profiles)
        if (d, i) not in used_slices
    ]
    return {
        "free": {
            "gpus": len(free_gpus),
            "devices": free_gpus,
            "mig_slices": free_slices,
            "shared": {str(d): 1.0 - s for d, s in shared.items()},
            "cpu": node.cpu - cpu,
            "memory_gb": node.memory_gb - mem,
        },
        "allocations": [
            {
                "job_id": str(a.job_id),
                "replica": a.replica,
                "gpu_type": a.gpu_type,
                "devices": list(a.devices),
                "mig": [list(m) for m in a.mig],
                "share": a.share,
                "units": a.units,
                "cpu": a.cpu,
                "memory_gb": a.memory_gb,
                "releasing": a.releasing_since is not None,
            }
            for a in allocs
        ],
    }
