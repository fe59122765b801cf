"""Turn a validated :class:`JobSpec` into the core's :class:`JobRequest`.

Shared by the dispatcher (rows from PostgreSQL) and the simulator
(scenario entries) so both feed the core the same thing.
"""

from __future__ import annotations

from app.domain.pod_resources import booked, node_selection, tolerations
from app.domain.spec import JobSpec
from app.scheduling.model import JobRequest, PriorityInfo


def expected_run_s(spec: JobSpec) -> float | None:
    """The run time the core plans with: the estimate, never past the time limit (a run
    is stopped there, so the limit is an estimate the job keeps); the limit alone when
    no estimate is given."""
    est, limit = spec.duration_estimate_s, spec.time_limit_s
    if limit is None:
        return est
    return limit if est is None else min(est, limit)


def request_from_spec(
    spec: JobSpec,
    *,
    job_id: str,
    pool: str,
    priority: PriorityInfo,
    submitted_at: float,
    preemption_count: int = 0,
    default_placement: str = "binpack",
    longest_attempt_s: float | None = None,
) -> JobRequest:
    r = spec.resources
    gpus = r.gpus if r.mode == "gpus" else None
    # the node must have the Pod's effective requests free, not just the main container's
    cpu, memory_gb = booked(spec.pod_template, r.cpu, r.memory_gb)
    return JobRequest(
        id=job_id,
        name=spec.name,
        team=spec.team,
        pool=pool,
        priority=priority.name,
        priority_value=priority.value,
        preemptible=priority.preemptible,
        submitted_at=submitted_at,
        replicas=1 if r.gpu_units is not None else spec.replica_count,
        min_available=1 if r.gpu_units is not None else spec.gang_min,
        gpus=gpus,
        gpu_units=r.gpu_units,
        mig=r.mig,
        gpu_share=r.gpu_share,
        min_gpu_memory_gb=r.min_gpu_memory_gb,
        gpu_types=tuple(r.gpu_types),
        avoid_gpu_types=tuple(r.avoid_gpu_types),
        allow_mixed_types=r.allow_mixed_types,
        cpu=cpu,
        memory_gb=memory_gb,
        tolerations=tolerations(spec.pod_template),
        node_selector=node_selection(spec.pod_template),
        placement=spec.placement or default_placement,
        topology=spec.topology,
        duration_estimate_s=expected_run_s(spec),
        preemption_count=preemption_count,
        longest_attempt_s=longest_attempt_s,
        # not the scenario's per-job ``speed`` (the simulator's truth, which the live
        # gpuq never has): placement reads the operator's GpuType.speed
    )
