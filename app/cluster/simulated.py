"""An in-process cluster: nodes from the config, pods that "run" for a while.

The default of ``gpuq serve`` and the test double of the dispatcher. A
bound job runs for ``duration_estimate_s / speed`` seconds of its clock
and then succeeds, unless a failure was injected. It also checks what a
real kubelet would refuse: a device handed out twice makes ``bind`` fail,
so a double placement cannot go unnoticed.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar

from app.clock import to_epoch, utcnow
from app.cluster.interface import (
    BindError,
    BindRequest,
    BookedCheck,
    Capabilities,
    JobStatusEvent,
    ReconcileReport,
)
from app.domain.config import GpuTypeConfig
from app.scheduling.model import Node, ReplicaPlacement
from app.scheduling.state import copy_node

DEFAULT_DURATION_S = 60.0
# outcomes of finished pods kept for reconcile (like finished Pods kept on Kubernetes)
FINISHED_KEPT = 100_000


@dataclass
class SimPod:
    job_id: str
    placements: list[ReplicaPlacement]
    started_at: float
    ends_at: float
    fail_message: str | None = None


@dataclass
class SimulatedCluster:
    nodes: list[Node] = field(default_factory=list)
    clock: Callable[[], datetime] = utcnow
    speed: float = 1.0
    default_duration_s: float = DEFAULT_DURATION_S
    # > 0: a stopped job's pods keep their devices this long (clock seconds),
    # like evicted Pods during their grace period on Kubernetes
    stop_delay_s: float = 0.0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self.pods: dict[str, SimPod] = {}
        self.stopping: dict[str, list[tuple[SimPod, float]]] = {}  # job -> (pod, gone at)
        # (node, device or slice) -> job, kept with the pods (stopping ones too): a
        # bind checks its own placements against it instead of re-walking every pod
        self._held: dict[tuple, str] = {}
        self._events: list[JobStatusEvent] = []
        # job -> how its last pod ended, until the job is bound again (oldest dropped
        # first): a dispatcher that lost the report (crash, failed pass) asks again
        self.finished: OrderedDict[str, JobStatusEvent] = OrderedDict()
        self._fail_at_end: dict[str, str] = {}
        self._fail_bind: dict[str, str] = {}
        self.bind_calls: Counter[str] = Counter()
        self.stop_calls: Counter[str] = Counter()

    # -- failure injection (tests)

    def fail_job(self, job_id: str, message: str = "injected failure") -> None:
        """The job will end ``failed`` instead of ``succeeded`` (now if it runs)."""
        with self._lock:
            self._fail_at_end[job_id] = message
            pod = self.pods.get(job_id)
            if pod is not None:
                pod.fail_message = message
                pod.ends_at = min(pod.ends_at, to_epoch(self.clock()))

    def fail_bind(self, job_id: str, message: str = "injected bind failure") -> None:
        with self._lock:
            self._fail_bind[job_id] = message

    # -- Cluster protocol

    # its nodes are the nodes table's (declared or posted); stop_delay_s > 0
    # makes stops asynchronous, reported by draining_job_ids()
    capabilities: ClassVar[Capabilities] = Capabilities(live_nodes=False)

    def list_nodes(self, booked: BookedCheck | None = None) -> list[Node]:
        """The nodes as declared; ``booked`` is not read: only gpuq makes Pods here."""
        return [copy_node(n) for n in self.nodes]

    def bind(self, req: BindRequest) -> None:
        with self._lock:
            self.bind_calls[req.job_id] += 1
            if req.job_id in self.pods:
                return  # idempotent: already bound (e.g. re-bind after a restart)
            if req.job_id in self._fail_bind:
                raise BindError(self._fail_bind.pop(req.job_id))
            self.finished.pop(req.job_id, None)
            taken = self._taken()
            for p in req.placements:
                for key in _holds(p):
                    if key in taken:
                        raise BindError(
                            f"replica {p.replica}: {key[0]} device {key[1]} is already in use "
                            f"by job {taken[key]}"
                        )
            now = to_epoch(self.clock())
            duration = (req.duration_s or self.default_duration_s) / self.speed
            self.pods[req.job_id] = SimPod(
                job_id=req.job_id,
                placements=list(req.placements),
                started_at=now,
                ends_at=now + duration,
                fail_message=self._fail_at_end.get(req.job_id),
            )
            for p in req.placements:
                for key in _holds(p):
                    self._held[key] = req.job_id
            self._events.append(JobStatusEvent(req.job_id, "running", "started"))

    def stop(self, job_id: str, reason: str, grace_seconds: float = 30.0) -> None:
        with self._lock:
            self.stop_calls[job_id] += 1
            pod = self.pods.pop(job_id, None)
            if pod is not None and self.stop_delay_s > 0:
                # the pod keeps its devices (still in _held) until it is gone
                gone_at = to_epoch(self.clock()) + self.stop_delay_s
                self.stopping.setdefault(job_id, []).append((pod, gone_at))
            else:
                self._release(pod)

    def acknowledge(self, events: Sequence[JobStatusEvent]) -> None:
        """Nothing is kept for the dispatcher's sake: events live in this process."""

    def avoided_nodes(self) -> Mapping[str, frozenset[str]]:
        """No kubelet here refuses a placed job."""
        return {}

    def forget_events(self) -> None:
        """A standby's pass: polling here acts on nothing in the cluster, so it forgets."""
        self.poll_events()

    def poll_events(self) -> list[JobStatusEvent]:
        with self._lock:
            now = to_epoch(self.clock())
            out, self._events = self._events, []
            for job_id, pod in list(self.pods.items()):
                if now >= pod.ends_at:
                    del self.pods[job_id]
                    self._release(pod)
                    if pod.fail_message:
                        ev = JobStatusEvent(job_id, "failed", pod.fail_message)
                    else:
                        ev = JobStatusEvent(job_id, "succeeded", "completed")
                    out.append(ev)
                    self.finished[job_id] = ev
                    while len(self.finished) > FINISHED_KEPT:
                        self.finished.popitem(last=False)
            return out

    def running_job_ids(self) -> set[str]:
        with self._lock:
            return set(self.pods)

    def reconcile(
        self,
        active_job_ids: set[str],
        placements: Mapping[str, Sequence[ReplicaPlacement]] | None = None,
        grace_seconds: float = 30.0,
        owners: Mapping[str, tuple[str, str | None]] | None = None,
    ) -> ReconcileReport:
        """After a restart or a failed pass of the dispatcher (this cluster outlived
        it): report again, as events, what every active job's pods are doing --
        running, or how they ended. A moved job's pods elsewhere than
        ``placements`` say are stopped (the job is then bound where it belongs).
        ``owners`` is not read: nobody else makes pods here."""
        report = ReconcileReport()
        # pods of jobs the database does not run are named, not stopped here: the
        # reconcile step stops them with every other job that holds no capacity
        report.orphans = self.running_job_ids() - set(active_job_ids)
        with self._lock:
            pending = {(e.job_id, e.phase) for e in self._events}
            for job_id in sorted(active_job_ids):
                pod = self.pods.get(job_id)
                want = (placements or {}).get(job_id)
                if pod is not None and want is not None and sorted(
                    map(_where, pod.placements)
                ) != sorted(map(_where, want)):
                    report.missing.add(job_id)
                    continue  # stopped below, outside the lock
                ev = (
                    JobStatusEvent(job_id, "running", "adopted")
                    if pod is not None
                    else self.finished.get(job_id)
                )
                if ev is None:
                    report.missing.add(job_id)
                    continue
                report.adopted.add(job_id)
                if (ev.job_id, ev.phase) not in pending:
                    self._events.append(ev)
        for job_id in sorted(report.missing):
            if job_id in self.pods:
                self.stop(job_id, "pods of an earlier placement (moved); rebinding",
                          grace_seconds)
        return report

    def draining_job_ids(self) -> set[str]:
        """Jobs with stopped pods still holding devices (``stop_delay_s``)."""
        with self._lock:
            self._expire_stopping()
            return set(self.stopping)

    def live_job_ids(self) -> set[str]:
        """Jobs whose current attempt has pods. A stop moves a job's pods from
        ``pods`` to ``stopping``, so ``pods`` holds current attempts only: a moved job
        whose old pods still drain is live once its new pods run (subtracting the
        draining jobs made the reconcile step requeue such a job as lost)."""
        with self._lock:
            return set(self.pods)

    def set_gpu_types(self, gpu_types: Sequence[GpuTypeConfig]) -> None:
        """Nodes carry their GPU type already; nothing to match."""

    def close(self) -> None:
        """Nothing held open."""

    def health(self) -> list[str]:
        """In process: always current."""
        return []

    def _expire_stopping(self) -> None:
        now = to_epoch(self.clock())
        for job_id, pods in list(self.stopping.items()):
            left = [(p, t) for p, t in pods if t > now]
            for p, t in pods:
                if t <= now:
                    self._release(p)
            if left:
                self.stopping[job_id] = left
            else:
                del self.stopping[job_id]

    # -- helpers

    def _taken(self) -> dict[tuple, str]:
        self._expire_stopping()
        return self._held

    def _release(self, pod: SimPod | None) -> None:
        if pod is None:
            return
        for p in pod.placements:
            for key in _holds(p):
                if self._held.get(key) == pod.job_id:
                    del self._held[key]


def _where(p: ReplicaPlacement) -> tuple:
    """Where a placement runs: node, cards, slices and share."""
    return (p.node, tuple(p.devices), tuple(tuple(m) for m in p.mig), p.share)


def _holds(p: ReplicaPlacement) -> list[tuple]:
    """Exclusive resources a placement holds: whole cards and MIG slices."""
    if p.mig:
        return [(p.node, f"{dev}/mig{idx}") for dev, idx, _prof in p.mig]
    if p.share > 0:
        return []  # vGPU shares may stack on one card
    return [(p.node, dev) for dev in p.devices]
