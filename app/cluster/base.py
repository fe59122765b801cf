"""The Cluster interface the dispatcher talks to.

Two implementations: :class:`~app.cluster.simulated.SimulatedCluster`
(in-process, the default of ``gpuq serve`` and the test double) and
:class:`~app.cluster.kubernetes.KubernetesCluster` (the real API).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

from app.scheduling.model import Node, ReplicaPlacement

PodPhase = Literal["pending", "running", "succeeded", "failed", "gone"]


@dataclass(frozen=True, slots=True)
class JobStatusEvent:
    """What the cluster reports about a job gpuq placed."""

    job_id: str
    phase: PodPhase
    message: str = ""


@dataclass(slots=True)
class BindRequest:
    """Everything needed to start one job's replicas on their nodes."""

    job_id: str
    name: str
    team: str
    pool: str
    priority: str
    placements: list[ReplicaPlacement]
    duration_s: float | None = None
    pod_template: dict = field(default_factory=dict)
    world_size: int = 1


class BindError(Exception):
    """A bind failed; whatever was bound for the job has been undone."""

    #: True when retrying cannot help (the cluster rejects the job's Pod as
    #: invalid): the job should fail instead of being requeued forever.
    permanent: bool = False


class InvalidPodError(BindError):
    """The API server refused the job's Pod itself (400/422: a bad pod_template)."""

    permanent = True


class Cluster(Protocol):
    def list_nodes(self) -> list[Node]:
        """Capacity of the nodes (usage by gpuq jobs is applied by the core)."""
        ...

    def bind(self, req: BindRequest) -> None:
        """Start all replicas or none (raise :class:`BindError` after undoing)."""
        ...

    def stop(self, job_id: str, reason: str, grace_seconds: float = 30.0) -> None:
        """Evict / delete the job's pods (preemption, cancel). Idempotent."""
        ...

    def poll_events(self) -> list[JobStatusEvent]:
        """Status changes since the last call."""
        ...

    def running_job_ids(self) -> set[str]:
        """Jobs that have pods on the cluster now (for reconcile after restart)."""
        ...

    # Optional (looked up with getattr; app/dispatch/releasing.py):
    #
    # draining_job_ids() -> set[str]: jobs with pods of a STOPPED attempt that
    #   still hold resources (evicted Pods in their grace period). A stopped
    #   job's capacity is released only when it is not listed here. Absent:
    #   stop() is synchronous (the pods are gone when it returns).
    # live_job_ids() -> set[str]: jobs whose CURRENT attempt has pods (or was
    #   just bound). Absent: running_job_ids() minus draining_job_ids().
