"""Read models for usage endpoints: what pools, teams and nodes hold now.

Counted in CU from live allocation rows (app/store/live_allocations.py, the one
definition every usage read shares); borrowed/lent from active lease rows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.store.live_allocations import held_allocations, live_units
from app.store.orm import AllocationRow, JobRow, LeaseRow, NodeRow, PoolRow, TeamRow
from app.store.pool_ledger import ledger_from_db


def pool_usage(
    session: Session, pool: PoolRow, visible: Callable[[str], bool] = lambda team: True
) -> dict[str, Any]:
    """Per GPU type: guaranteed, used, borrowed, lent, and the scheduler's view
    of them (effective guarantee, idle, shared, lendable) -- all read from one
    ledger built from live allocations and active leases, so they agree. A lease's
    ``job_id`` is null unless ``visible(team of the job)`` (pools are shared, jobs
    are not: as ``GET /v1/leases``)."""
    ledger = ledger_from_db(session)
    name = pool.name
    types = list(
        dict.fromkeys([
            *(pool.gpu_types or []), *(pool.guaranteed or {}),
            *(t for (p, t), v in ledger.used.items() if p == name and v > 0),
            *(t for (p, t), v in ledger.borrowed.items() if p == name and v > 0),
            *(t for (p, t), v in ledger.lent.items() if p == name and v > 0),
        ])
    )
    by_type = {
        t: {
            "guaranteed": float((pool.guaranteed or {}).get(t, 0.0)),
            "used": ledger.used.get((name, t), 0.0),
            "borrowed": ledger.borrowed.get((name, t), 0.0),
            "lent": ledger.lent.get((name, t), 0.0),
            # the scheduler's view: guarantee after scaling to capacity, idle, shared use
            "guaranteed_effective": ledger.guarantee(name, t),
            "idle": ledger.idle(name, t),
            "shared": ledger.shared_used(name, t),
            "lendable": ledger.lendable(name, t),
        }
        for t in types
    }
    active_leases = [
        {"id": str(r.id), "borrower": r.borrower, "lender": r.lender, "gpu_type": r.gpu_type,
         "units": r.units, "job_id": str(r.job_id) if visible(team) else None,
         "started_at": r.started_at, "expires_at": r.expires_at, "state": r.state}
        for r, team in session.execute(
            select(LeaseRow, JobRow.team)
            .join(JobRow, JobRow.id == LeaseRow.job_id)
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
    by_type = live_units(session, JobRow.team, [JobRow.team == team.name]).get(team.name, {})
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
        held_allocations().order_by(AllocationRow.node, AllocationRow.id)
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
