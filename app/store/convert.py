"""Database rows -> the core's dataclasses (one conversion, used by every reader).

The snapshot, the dispatcher's picture, the pool ledger and the releasing
rows all turn rows into :mod:`app.scheduling.model` objects here, so they
cannot disagree on what a row means.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from app.clock import to_epoch
from app.domain.from_config import (
    gpu_type_from_config,
    node_from_config,
    pool_from_config,
    team_from_config,
)
from app.domain.spec import JobSpec
from app.domain.spec_to_request import request_from_spec
from app.scheduling.model import (
    GpuType,
    JobRequest,
    LeaseInfo,
    Node,
    PoolInfo,
    PriorityInfo,
    ReplicaPlacement,
    TeamInfo,
)
from app.store.orm import AllocationRow, GpuTypeRow, JobRow, LeaseRow, NodeRow, PoolRow, TeamRow


# GPU types, nodes, pools and teams: the same conversion as a config file's
# (app/domain/from_config.py), so a catalog means one thing in both.
def gpu_type_info(r: GpuTypeRow) -> GpuType:
    return gpu_type_from_config(r)


def node_info(r: NodeRow) -> Node:
    return node_from_config(r, cordoned=r.cordon is not None)


def pool_info(r: PoolRow) -> PoolInfo:
    return pool_from_config(r)


def team_info(r: TeamRow) -> TeamInfo:
    return team_from_config(r)


def copied(row: object, names: Iterable[str]) -> dict[str, Any]:
    """``row``'s attributes ``names`` as keyword arguments: the columns that mean the
    same on both sides pass as they are, so each conversion (here and the API's
    ``allocation_out``/``lease_out``) spells out only what it changes."""
    return {n: getattr(row, n) for n in names}


ALLOCATION_AS_IS = ("replica", "node", "gpu_type", "share", "units", "cpu", "memory_gb")
LEASE_AS_IS = ("borrower", "lender", "gpu_type", "units")


def placement_of(a: AllocationRow) -> ReplicaPlacement:
    return ReplicaPlacement(
        **copied(a, ALLOCATION_AS_IS),
        devices=tuple(int(d) for d in a.devices),
        mig=tuple((int(d), int(i), str(p)) for d, i, p in a.mig),
        share_memory_gb=a.share_memory_gb,
    )


def lease_info(r: LeaseRow) -> LeaseInfo:
    return LeaseInfo(
        **copied(r, LEASE_AS_IS),
        id=str(r.id),
        job_id=str(r.job_id),
        started_at=to_epoch(r.started_at),
        expires_at=to_epoch(r.expires_at),
    )


def job_request(
    job: JobRow, priorities: dict[str, PriorityInfo], pools: dict[str, PoolInfo]
) -> JobRequest:
    spec = JobSpec.model_validate(job.spec)
    prio = priorities.get(job.priority) or PriorityInfo(job.priority, 0, True)
    pool = pools.get(job.pool)
    return request_from_spec(
        spec,
        job_id=str(job.id),
        pool=job.pool,
        priority=prio,
        submitted_at=to_epoch(job.submitted_at),
        preemption_count=job.preemption_count,
        default_placement=pool.placement if pool else "binpack",
        longest_attempt_s=job.longest_attempt_s,
    )
