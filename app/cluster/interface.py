"""The Cluster interface the dispatcher talks to.

Two implementations: :class:`~app.cluster.simulated.SimulatedCluster`
(in-process, the default of ``gpuq serve`` and the test double) and
:class:`~app.cluster.kubernetes.KubernetesCluster` (the real API).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from app.domain.config import GpuTypeConfig
from app.domain.owner import WorkloadOwner
from app.scheduling.model import Node, ReplicaPlacement

PodPhase = Literal["pending", "running", "succeeded", "failed", "gone"]


@dataclass(frozen=True, slots=True)
class JobStatusEvent:
    """What the cluster reports about a job gpuq placed."""

    job_id: str
    phase: PodPhase
    message: str = ""
    # False: the job ended (failed, gone) while some of its Pods still hold their
    # resources (terminating in a grace period, on a lost node): its capacity is held
    # until the cluster shows them gone, so no other job is bound onto those cards
    pods_gone: bool = True


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
    # the job's time_limit_s: its Pods' activeDeadlineSeconds, past a margin (k8s_pods)
    time_limit_s: float | None = None
    pod_template: dict = field(default_factory=dict)
    world_size: int = 1
    labels: dict = field(default_factory=dict)  # the job's ``labels``: on every Pod
    # the Kubernetes workload (Job, JobSet) the job came from: its own controller makes
    # the Pods, gpuq starts and stops it and binds its Pods (app/cluster/workloads/)
    owner: WorkloadOwner | None = None
    # the admission this bind performs (the job's revision when it was admitted): the
    # Pod names derive from it, so two binds of one admission (a deposed and a new
    # leader, a retried call) collide on the names instead of making two Pod sets
    attempt: str = ""
    # the binding leader's epoch (fencing token), stamped on every Pod
    leader_epoch: int | None = None
    # the job's resources.cpu / memory_gb: the main container's own requests. A
    # placement's cpu/memory_gb are the whole Pod's (sidecars, init containers...:
    # app/domain/pod_resources.py); None: the placement's (no template extras)
    main_cpu: float | None = None
    main_memory_gb: float | None = None


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a cluster declares about itself. The dispatcher reads these flags;
    it never probes an implementation with getattr/hasattr."""

    #: True: :meth:`Cluster.list_nodes` is the truth (live capacity, usage by
    #: other Pods), mirrored into the nodes table every pass, and the cluster
    #: needs the GPU types (:meth:`Cluster.set_gpu_types`) and a
    #: :meth:`Cluster.reconcile` after a leader change. False: the nodes table
    #: is the truth (a static or simulated cluster).
    live_nodes: bool = False
    #: True: the cluster queues Kubernetes-native workloads (Job, JobSet): the
    #: dispatcher runs the front door (app/dispatch/workloads.py) every pass, and the
    #: cluster has ``workloads`` and ``report_finished``.
    workloads: bool = False
    #: How many jobs' binds the dispatcher performs at once. A bind on Kubernetes is
    #: network round trips (create each Pod, then its pods/binding), so one at a time
    #: leaves the API server idle between them; kube-scheduler binds asynchronously,
    #: up to ``parallelism`` (16) at once (pkg/scheduler/schedule_one.go, the binding
    #: cycle in a goroutine). 1: one after another (an in-process cluster).
    bind_workers: int = 1


@dataclass(slots=True)
class ReconcileReport:
    adopted: set[str] = field(default_factory=set)  # active in the DB, Pods found
    missing: set[str] = field(default_factory=set)  # active in the DB, no usable Pods: requeue
    orphans: set[str] = field(default_factory=set)  # Pods of jobs the DB does not run: removed


class BindError(Exception):
    """A bind failed; whatever was bound for the job has been undone."""

    #: True when retrying cannot help (the cluster rejects the job's Pod as
    #: invalid): the job should fail instead of being requeued forever.
    permanent: bool = False
    #: False when a new admission gets past it at once (see :class:`NameTaken`): the
    #: job is requeued without sitting out a backoff.
    hold: bool = True


class NameTaken(BindError):
    """A Pod name of this admission exists already (409 AlreadyExists): another bind of
    the same admission made it (a deposed leader's, or an earlier attempt whose Pods
    are still terminating). The job is requeued at once; its next admission gets new
    names, and the other Pods are stopped as not holding capacity."""

    hold = False


class InvalidPodError(BindError):
    """The API server refused the job's Pod for a reason of the job's own, the same on
    every try (a bad pod_template, a missing namespace or PriorityClass, Pod Security,
    a webhook's denial: app/cluster/k8s_refusals.py): the job fails with its message."""

    permanent = True


#: given job ids, those whose capacity gpuq's books hold (``Cluster.list_nodes``)
BookedCheck = Callable[[set[str]], set[str]]


class Cluster(Protocol):
    """Every method is required; what differs between clusters is declared in
    :attr:`capabilities`."""

    @property
    def capabilities(self) -> Capabilities:
        """Read-only: a class may declare it once (a ClassVar) or per instance."""
        ...

    def list_nodes(self, booked: BookedCheck | None = None) -> list[Node]:
        """Capacity of the nodes (usage by gpuq jobs is applied by the core).

        ``booked``: given job ids, those whose capacity gpuq's books hold (live or
        releasing allocations). A Pod with gpuq's labels for any other job -- a stray:
        the job is over, or never existed -- is in nobody's books, so a live cluster
        counts what it requests on its node like another workload's until it is gone.
        None: every Pod with gpuq's labels is taken for booked."""
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

    def forget_events(self) -> None:
        """A standby's pass: drop the status changes since the last call without acting
        on them (only the leader changes the cluster; a new leader reconciles from the
        cluster itself)."""
        ...

    def acknowledge(self, events: Sequence[JobStatusEvent]) -> None:
        """These polled events are committed to the database: what the cluster kept so
        that no outcome could be lost may go now (on Kubernetes, gpuq's outcome
        finalizer on the Pods). Only the leader calls it, after its commit."""
        ...

    def avoided_nodes(self) -> Mapping[str, frozenset[str]]:
        """Job id -> nodes the job is not placed on for now (a node's kubelet refused
        its Pod at admission a moment ago); empty where nothing refuses."""
        ...

    def running_job_ids(self) -> set[str]:
        """Jobs that have pods on the cluster now (for reconcile after restart)."""
        ...

    def draining_job_ids(self) -> set[str]:
        """Jobs with pods of a STOPPED attempt that still hold resources (evicted
        Pods in their grace period). A stopped job's capacity is released only
        when it is not listed here (app/dispatch/releasing_view.py). Empty when stop()
        is synchronous."""
        ...

    def live_job_ids(self) -> set[str]:
        """Jobs whose CURRENT attempt has pods (or was just bound)."""
        ...

    def reconcile(
        self,
        active_job_ids: set[str],
        placements: Mapping[str, Sequence[ReplicaPlacement]] | None = None,
        grace_seconds: float = 30.0,
        owners: Mapping[str, tuple[str, str | None]] | None = None,
    ) -> ReconcileReport:
        """After a restart, leader change or failed pass: square the cluster's
        Pods with the jobs that hold capacity (adopt, remove orphans and
        half-bound gangs) and report again, as events, the phase of every
        active job's Pods -- finished ones included -- so nothing a standby or
        a failed pass dropped is lost. ``owners``: each active job's team and, for a
        workload's job, the workload's namespace (where its Pods may be)."""
        ...

    def set_gpu_types(self, gpu_types: Sequence[GpuTypeConfig]) -> None:
        """The GPU types (product patterns) to recognise nodes by."""
        ...

    def close(self) -> None:
        """Release what the cluster holds open (watches, informers)."""
        ...

    def health(self) -> list[str]:
        """Why the cluster's view is unfit to plan on now (empty: fit), e.g. watches
        that stopped following the cluster; shown by ``/healthz``."""
        ...
