"""Database rows -> the core's dataclasses (one conversion, used by every reader).

The snapshot, the dispatcher's picture, the pool ledger and the releasing
rows all turn rows into :mod:`gpuq.scheduling.model` objects here, so they
cannot disagree on what a row means.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpuq.clock import to_epoch
from gpuq.domain.from_config import pool_from_config, team_from_config
from gpuq.domain.spec import JobSpec
from gpuq.domain.spec_to_request import request_from_spec
from gpuq.scheduling.model import (
    Device,
    GpuType,
    JobRequest,
    LeaseInfo,
    MigProfile,
    Node,
    PoolInfo,
    PriorityInfo,
    ReplicaPlacement,
    TeamInfo,
)
from gpuq.store.orm import AllocationRow, GpuTypeRow, JobRow, LeaseRow, NodeRow, PoolRow, TeamRow


def gpu_type_info(r: GpuTypeRow) -> GpuType:
    return GpuType(
        name=r.name,
        memory_gb=r.memory_gb,
        weight=r.weight,
        mig_profiles={
            k: MigProfile(k, float(v["memory_gb"]), float(v["compute_fraction"]))
            for k, v in (r.mig_profiles or {}).items()
        },
        shareable=r.shareable,
        resource_name=r.resource_name,
        speed=r.speed,
    )


def node_info(r: NodeRow) -> Node:
    layout = {int(k): tuple(v) for k, v in (r.mig_layout or {}).items()}
    return Node(
        name=r.name,
        gpu_type=r.gpu_type if r.gpus > 0 else None,
        devices=[Device(index=i, mig_layout=layout.get(i, ())) for i in range(r.gpus)],
        cpu=r.cpu,
        memory_gb=r.memory_gb,
        rack=r.rack,
        network=r.network,
        nvlink_domain=r.nvlink_domain,
        labels=dict(r.labels or {}),
        taints=tuple(
            (t.get("key", ""), t.get("value", ""), t.get("effect", "NoSchedule"))
            for t in (r.taints or [])
        ),
        # an operator's cordon takes it out of service whatever its definition says
        schedulable=r.schedulable and r.cordon is None,
    )


def pool_info(r: PoolRow) -> PoolInfo:
    return pool_from_config(r)  # the same conversion as a config file's pool


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
