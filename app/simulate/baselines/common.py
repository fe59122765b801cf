"""What the baseline models share: a job's card count per GPU type and gang placement.

The queues gpuq is compared with count GPUs per model (a Kubernetes
extended resource, a Slurm GRES type); none of them knows CU. A job is put
entirely on one GPU type (Kueue assigns one flavor per resource, Volcano
and Slurm request one GRES type), all its replicas or none (gang). Which
node a replica lands on is each system's node-scoring rule, passed in as
``node_key`` (lower is better, ties by node name).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from app.scheduling.demands import Demand
from app.scheduling.model import JobRequest, Node, ReplicaPlacement, RunningJob, Snapshot
from app.scheduling.state import ClusterState
from app.simulate.baselines.fifo import place_typed, typed_demands
from app.simulate.measures import gpus_held

NodeKey = Callable[[Node, ReplicaPlacement], float]


def replica_counts(job: JobRequest) -> tuple[int, int]:
    """(replicas placed, replicas needed): a ``gpu_units`` job is one replica."""
    if job.mode == "gpu_units":
        return 1, 1
    return job.replicas, job.min_available


def demand_cards(d: Demand, weight: float) -> float:
    """Cards one replica takes: whole cards, a share's fraction, a slice's CU over the card's."""
    if d.kind == "none":
        return 0.0
    if d.kind == "whole":
        return float(d.count)
    if d.kind == "share":
        return d.share
    return d.units / weight if weight > 0 else 1.0


def job_cards_by_type(job: RunningJob, snap_types: Mapping) -> dict[str, float]:
    out: dict[str, float] = {}
    for p in job.placements:
        if p.gpu_type:
            out[p.gpu_type] = out.get(p.gpu_type, 0.0) + gpus_held(p, snap_types)
    return out


@dataclass(frozen=True, slots=True)
class TypeOption:
    """The job on one GPU type: the demand per replica and the cards of the whole job."""

    gpu_type: str | None
    demand: Demand
    cards: float


def type_options(job: JobRequest, snap: Snapshot) -> list[TypeOption]:
    """Every GPU type the job's request allows, with its cards (memory fit included:
    the user's request names the types, or a node selector on GPU memory)."""
    replicas, _need = replica_counts(job)
    out = []
    seen: set[str | None] = set()
    for d in typed_demands(job, snap):
        if d.gpu_type in seen:
            continue
        seen.add(d.gpu_type)
        t = snap.gpu_types.get(d.gpu_type) if d.gpu_type else None
        out.append(TypeOption(d.gpu_type, d, demand_cards(d, t.weight if t else 1.0) * replicas))
    return out


class Placer:
    """Gang placement of a job on one GPU type over a working ClusterState.

    Remembers, for the rest of a cycle, request shapes that did not fit on a
    type (capacity only shrinks within a cycle unless something is released,
    which :meth:`released` records), so a long queue costs a lookup per job.
    """

    def __init__(self, snap: Snapshot, state: ClusterState, node_key: NodeKey) -> None:
        self.snap = snap
        self.state = state
        self.node_key = node_key
        self.by_type: dict[str | None, list[str]] = {}
        for n in sorted(snap.nodes, key=lambda n: n.name):
            if n.schedulable:
                self.by_type.setdefault(n.gpu_type, []).append(n.name)
        self.all_names = [n for names in self.by_type.values() for n in names]
        self.all_names.sort()
        self._failed: set[tuple] = set()

    def released(self) -> None:
        self._failed.clear()

    def _shape(self, job: JobRequest, opt: TypeOption) -> tuple:
        return (opt.gpu_type, opt.demand, job.cpu, job.memory_gb, job.replicas,
                job.min_available, job.mode)

    def place(self, job: JobRequest, opt: TypeOption, memo: bool = True,
              only: list[str] | None = None) -> tuple[ReplicaPlacement, ...] | None:
        """Place (and reserve) all replicas of ``job`` as ``opt`` says, or nothing.

        ``memo=False`` for what-if states (victims removed): a shape that failed on
        the real state may fit there. ``only``: these nodes, in this order of preference."""
        shape = self._shape(job, opt)
        if only is not None:
            memo = False
        if memo and shape in self._failed:
            return None
        names = self.all_names if opt.demand.kind == "none" else self.by_type.get(opt.gpu_type, [])
        rank = {n: i for i, n in enumerate(only)} if only is not None else None
        if only is not None:
            names = only
        replicas, need = replica_counts(job)
        placed: list[ReplicaPlacement] = []
        for r in range(replicas):
            best: tuple[float, str] | None = None
            best_p: ReplicaPlacement | None = None
            for name in names:
                node = self.state.nodes[name]
                p = place_typed(job, node, self.snap, r, [opt.demand])
                if p is None:
                    continue
                key = ((rank[name] if rank is not None else self.node_key(node, p)), name)
                if best is None or key < best:
                    best, best_p = key, p
            if best_p is None:
                break
            self.state.apply(best_p)
            placed.append(best_p)
        if len(placed) >= need:
            return tuple(placed)
        for p in placed:
            self.state._apply(p, -1)  # a rollback, not a release
        if memo:
            self._failed.add(shape)
        return None

    def fits_without(self, job: JobRequest, opt: TypeOption, victims: list[RunningJob]) -> bool:
        """Would ``job`` fit as ``opt`` says if ``victims`` were gone? (State unchanged.)"""
        with self.state.simulate_remove(victims):
            placed = self.place(job, opt, memo=False)
            for p in placed or ():
                self.state._apply(p, -1)  # a rollback, not a release
        return bool(placed)

    def remove(self, jobs: Iterable[RunningJob]) -> None:
        """Free the capacity of preempted jobs for the rest of the cycle."""
        for j in jobs:
            for p in j.placements:
                if p.node in self.state.nodes:
                    self.state.unapply(p)
        self.released()


def free_cards(node: Node) -> float:
    """Whole-card equivalents free on a node (shared cards count their free fraction)."""
    return sum(1.0 - d.share_used for d in node.devices
               if not (d.whole_used or d.mig_layout or d.external))


def least_allocated(node: Node, p: ReplicaPlacement) -> float:
    """kube-scheduler's default NodeResourcesFit ``LeastAllocated`` score (CPU and memory,
    equal weights), negated: the emptiest node after the placement first (spreading)."""
    cpu = (node.cpu_free - p.cpu) / node.cpu if node.cpu > 0 else 0.0
    mem = (node.memory_free_gb - p.memory_gb) / node.memory_gb if node.memory_gb > 0 else 0.0
    return -(cpu + mem) / 2.0


def most_allocated(node: Node, p: ReplicaPlacement) -> float:
    """Volcano's ``binpack`` node order (CPU, memory and the GPU resource, weight 1 each),
    negated: the node that is fullest after the placement first."""
    used = 0.0
    parts = 0
    if node.cpu > 0:
        used += (node.cpu_used + p.cpu) / node.cpu
        parts += 1
    if node.memory_gb > 0:
        used += (node.memory_used_gb + p.memory_gb) / node.memory_gb
        parts += 1
    if node.devices and p.gpu_type:
        taken = len(p.devices) if p.share <= 0 else p.share
        used += (len(node.devices) - free_cards(node) + taken) / len(node.devices)
        parts += 1
    return -(used / parts) if parts else 0.0


def best_fit(node: Node, p: ReplicaPlacement) -> float:
    """Slurm ``select/cons_tres`` best fit: the node left with the fewest free GPUs, then CPUs."""
    taken = len(p.devices) if p.share <= 0 else p.share
    return (free_cards(node) - taken) * 1e6 + (node.cpu_free - p.cpu)
