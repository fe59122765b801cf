"""The core's pool ledger, built from the database for read endpoints, so
/v1/pools/{name}/usage shows the same numbers the scheduler decides with
(idle guarantee, shared use, what may still be lent), from the same live
allocations (app/store/live_allocations.py) as the usage figures beside them."""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.scheduling.pools import PoolLedger
from app.store.convert import pool_info
from app.store.live_allocations import live_allocations
from app.store.orm import AllocationRow, GpuTypeRow, JobRow, LeaseRow, NodeRow, PoolRow


def ledger_from_db(session: Session) -> PoolLedger:
    weights = {r.name: r.weight for r in session.scalars(select(GpuTypeRow))}
    capacity: dict[str, float] = defaultdict(float)
    for n in session.scalars(select(NodeRow)):
        if n.gpu_type in weights and n.gpus > 0:
            capacity[n.gpu_type] += weights[n.gpu_type] * n.gpus
    pools = {r.name: pool_info(r) for r in session.scalars(select(PoolRow))}
    ledger = PoolLedger(pools, capacity)
    used: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    pool_of: dict[int, str] = {}
    for job_id, pool, gpu_type, units in session.execute(
        live_allocations(JobRow.id, JobRow.pool, AllocationRow.gpu_type, AllocationRow.units)
    ):
        pool_of[job_id] = pool
        if gpu_type is not None:
            used[job_id][gpu_type] += float(units or 0.0)
    leases: dict[int, list[tuple[str, str, float]]] = defaultdict(list)
    for lr in session.scalars(select(LeaseRow).where(LeaseRow.state == "active")):
        leases[lr.job_id].append((lr.lender, lr.gpu_type, lr.units))
    for job_id, pool in pool_of.items():
        ledger.add(str(job_id), pool, dict(used[job_id]), leases.get(job_id, ()))
    return ledger
