"""What a pass decided to do on the cluster, handed from one part to the next.

Reconcile and plan-and-write each produce a :class:`Plan` after their
transaction commits; the bind part performs it (stops first, then binds).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.cluster.interface import BindRequest
from app.domain.owner import owner_of
from app.scheduling.model import CycleResult, ReplicaPlacement
from app.store.batch_states import AdmittedRow
from app.store.convert import placement_of
from app.store.orm import JobRow


@dataclass
class Plan:
    """Cluster calls decided by a committed transaction."""

    stops: list[tuple[str, str]] = field(default_factory=list)  # (job id, reason)
    binds: list[BindRequest] = field(default_factory=list)
    result: CycleResult | None = None
    grace_seconds: float | None = None  # scheduler.preemption_grace_s, when set

    def extend(self, other: Plan) -> None:
        """Add ``other``'s calls after this plan's; its result and grace win."""
        self.stops += other.stops
        self.binds += other.binds
        self.result = other.result
        self.grace_seconds = other.grace_seconds


def bind_request(
    job: JobRow | AdmittedRow, placements: list[ReplicaPlacement] | None = None
) -> BindRequest:
    """What the cluster needs to start ``job``: its stored allocations, or the
    placements just written for it (saves reloading them)."""
    if placements is None:
        assert isinstance(job, JobRow)
        placements = [placement_of(a) for a in job.allocations]
    spec = job.spec or {}
    return BindRequest(
        job_id=str(job.id),
        name=job.name,
        team=job.team,
        pool=job.pool,
        priority=job.priority,
        placements=placements,
        duration_s=spec.get("duration_estimate_s"),
        time_limit_s=spec.get("time_limit_s"),
        pod_template=dict(spec.get("pod_template") or {}),
        world_size=len(placements),
        labels=dict(spec.get("labels") or {}),
        owner=owner_of(job.submitted_by, job.idempotency_key),
        attempt=str(job.revision),
        main_cpu=(spec.get("resources") or {}).get("cpu"),
        main_memory_gb=(spec.get("resources") or {}).get("memory_gb"),
    )
