"""The FIFO baselines: what the default Kubernetes scheduler does with GPUs.

* ``fifo-count``: what the default Kubernetes scheduler does with
  ``nvidia.com/gpu``: one queue in submit order (no priorities, pools,
  quotas or fairness), GPUs counted without type, each job on the first
  node(s) by name that have the cards, CPU and memory. A replica
  asks for ``gpus`` whole cards; a ``gpu_share`` or ``mig`` replica for one
  whole card; a ``gpu_units`` job for ``ceil(units / mean card weight)``
  cards on one node. It ignores ``gpu_types`` and memory needs, so a job
  can land on a card with too little memory: the simulator then fails
  that run 60 s after start (:func:`out_of_memory`) and requeues it, at most 3
  times (docs/evaluation.md).
* ``fifo-typed``: the same queue and first fit, but type- and
  memory-aware: only allowed types whose memory suffices, shares and MIG
  slices as requested (the core's demands and device pickers).

A job that does not fit is skipped, not waited for: later jobs may go
first (the default scheduler has no head-of-line blocking). Replicas are
placed all-or-nothing (``min_available``). :func:`fifo_policy` with a
``choose`` rule is also the queue of the paper's Random
(:mod:`.random_fit`) and BestFit (:mod:`.bestfit`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from app.scheduling.demands import Demand
from app.scheduling.filters import (
    allowed_types,
    node_fits_host,
    pick_mig,
    pick_share,
    pick_whole,
    selects,
    tolerates,
)
from app.scheduling.model import (
    Admission,
    CycleResult,
    JobRequest,
    Node,
    ReplicaPlacement,
    Snapshot,
)
from app.scheduling.modes import replica_options
from app.scheduling.state import ClusterState


def _fifo(snap: Snapshot) -> list[JobRequest]:
    return sorted(snap.pending, key=lambda j: (j.submitted_at, j.id))


def _shortest(snap: Snapshot) -> list[JobRequest]:
    """Shortest expected run first (``JobRequest.expected_s``: the declared estimate, else
    the team history's prediction); jobs with neither after, in submit order."""
    def key(j: JobRequest) -> tuple:
        d = j.expected_s
        return (d is None, d or 0.0, j.submitted_at, j.id)

    return sorted(snap.pending, key=key)


def _count_cards(job: JobRequest, snap: Snapshot) -> int:
    mode = job.mode
    if mode == "gpus":
        return job.gpus or 0
    if mode == "gpu_units":
        weights = [t.weight for t in snap.gpu_types.values()] or [1.0]
        return max(1, math.ceil((job.gpu_units or 0.0) / (sum(weights) / len(weights)) - 1e-9))
    return 1  # a share or a MIG slice takes a whole card for the default scheduler


def admits(job: JobRequest, node: Node) -> bool:
    """The node rules every baseline's Pods meet, as gpuq's do: its host room, the taints
    the job does not tolerate and the node selection it states. Kueue's and `fifo`'s
    Pods go through kube-scheduler (``pkg/scheduler/framework/plugins/noderesources``,
    ``tainttoleration/taint_toleration.go``, ``nodeaffinity/node_affinity.go``), Volcano's
    predicates plug-in runs the same filters (``pkg/scheduler/plugins/predicates``), and
    Slurm's node features and partitions do that job; a Pod placed against them would be
    refused by the kubelet. The same filters as gpuq's placement
    (:mod:`app.scheduling.filters`), so every policy gets the same rules."""
    return node_fits_host(node, job.cpu, job.memory_gb) and node_rules_admit(job, node)


def node_rules_admit(job: JobRequest, node: Node) -> bool:
    """:func:`admits` without the room: the taints and the node selection (what a plan
    of future starts, Slurm's backfill, reads)."""
    if node.taints and not tolerates(job, node):
        return False
    return not job.node_selector or selects(job, node)


def _place_count(
    job: JobRequest, node: Node, snap: Snapshot, replica: int
) -> ReplicaPlacement | None:
    if not admits(job, node):
        return None
    k = _count_cards(job, snap)
    if k == 0:
        return ReplicaPlacement(replica, node.name, None, cpu=job.cpu, memory_gb=job.memory_gb)
    if node.gpu_type is None:
        return None
    devs = pick_whole(node, k)
    if devs is None:
        return None
    t = snap.gpu_types.get(node.gpu_type)
    return ReplicaPlacement(
        replica, node.name, node.gpu_type, devices=devs,
        units=(t.weight if t else 1.0) * k, cpu=job.cpu, memory_gb=job.memory_gb,
    )


def place_typed(
    job: JobRequest, node: Node, snap: Snapshot, replica: int, demands: list[Demand]
) -> ReplicaPlacement | None:
    if not admits(job, node):
        return None
    for d in demands:
        if d.kind == "none":
            return ReplicaPlacement(replica, node.name, None, cpu=job.cpu, memory_gb=job.memory_gb)
        if node.gpu_type != d.gpu_type:
            continue
        assert d.gpu_type is not None  # only a "none" demand (handled above) has no model
        t = snap.gpu_types[d.gpu_type]
        if d.kind == "whole":
            devs = pick_whole(node, d.count)
            if devs is not None:
                return ReplicaPlacement(replica, node.name, d.gpu_type, devices=devs,
                                        units=d.units, cpu=job.cpu, memory_gb=job.memory_gb)
        elif d.kind == "share":
            dev = pick_share(node, t, d.share, d.share_memory_gb)
            if dev is not None:
                return ReplicaPlacement(replica, node.name, d.gpu_type, devices=(dev,),
                                        share=d.share, share_memory_gb=d.share_memory_gb,
                                        units=d.units, cpu=job.cpu, memory_gb=job.memory_gb)
        elif d.kind == "mig":
            got = pick_mig(node, d.profile)
            if got is not None:
                return ReplicaPlacement(replica, node.name, d.gpu_type,
                                        mig=((got[0], got[1], d.profile),), units=d.units,
                                        cpu=job.cpu, memory_gb=job.memory_gb)
    return None


def typed_demands(job: JobRequest, snap: Snapshot) -> list[Demand]:
    types = allowed_types(job, snap.gpu_types, snap.pools)
    if job.mode == "gpu_units":
        out = []
        for t in types:
            n = max(1, math.ceil((job.gpu_units or 0.0) / t.weight - 1e-9))
            out.append(Demand(t.name, "whole", count=n, units=n * t.weight, memory_gb=t.memory_gb))
        return out
    return replica_options(job, types)


Chooser = Callable[[JobRequest, list[ReplicaPlacement], ClusterState], ReplicaPlacement]


def fifo_policy(snap: Snapshot, typed: bool, choose: Chooser | None = None,
                prefer_speed: bool = False, shortest_first: bool = False) -> CycleResult:
    """FIFO over the pending jobs; each replica on the first feasible node by name,
    or on the node ``choose`` picks among all feasible ones. ``prefer_speed``: nodes of
    faster GPU types first (a preferred node affinity on the operator's speed table,
    ``GpuType.speed``, the one gpuq reads), then by name. ``shortest_first``: the
    queue in order of expected run time (:func:`_shortest`) instead of submit time --
    not something the default scheduler does, but the textbook rule for mean JCT: fed
    every job's exact run time (a Philly window built with ``estimate_factor: 1.0``) it
    is the clairvoyant reference of docs/evaluation.md, what ordering alone can reach."""
    result = CycleResult()
    state = ClusterState.from_snapshot(snap)

    def speed(n: Node) -> float:
        t = snap.gpu_types.get(n.gpu_type) if n.gpu_type else None
        return t.speed if t is not None else 0.0

    # by name: decisions never depend on input order
    names = [n.name for n in sorted(snap.nodes, key=lambda n: (
        -speed(n) if prefer_speed else 0.0, n.name))]
    for job in (_shortest if shortest_first else _fifo)(snap):
        result.order.append(job.id)
        demands = typed_demands(job, snap) if typed else []
        if typed and not demands:
            result.unschedulable[job.id] = "no allowed GPU type has enough memory for this job"
            continue
        replicas = 1 if job.mode == "gpu_units" else job.replicas
        need = 1 if job.mode == "gpu_units" else job.min_available
        placed: list[ReplicaPlacement] = []
        for r in range(replicas):
            options: list[ReplicaPlacement] = []
            for name in names:
                node = state.nodes[name]
                got = (
                    place_typed(job, node, snap, r, demands)
                    if typed
                    else _place_count(job, node, snap, r)
                )
                if got is not None:
                    options.append(got)
                    if choose is None:
                        break
            if not options:
                break
            got = options[0] if choose is None else choose(job, options, state)
            state.apply(got)
            placed.append(got)
        if len(placed) >= need:
            result.admissions.append(Admission(job.id, tuple(placed)))
        else:
            for p in placed:
                state.unapply(p)
            result.reasons[job.id] = "no node has the free capacity (first fit)"
    return result


def fifo_count(snap: Snapshot) -> CycleResult:
    """One FIFO queue, GPUs counted without type, first node that fits."""
    return fifo_policy(snap, typed=False)


def fifo_typed(snap: Snapshot) -> CycleResult:
    """One FIFO queue, type- and memory-aware, first node that fits."""
    return fifo_policy(snap, typed=True)


def fifo_typed_with(
    prefer_speed: bool = False, shortest_first: bool = False
) -> Callable[[Snapshot], CycleResult]:
    """``fifo-typed`` with its operator setting, ``prefer_speed``, and the reference
    order ``shortest_first`` (:func:`fifo_policy`; not in the tuning grid: it is not
    what a Kubernetes operator can set)."""
    if not prefer_speed and not shortest_first:
        return fifo_typed

    def policy(snap: Snapshot) -> CycleResult:
        return fifo_policy(snap, typed=True, prefer_speed=prefer_speed,
                           shortest_first=shortest_first)

    return policy


def out_of_memory(job: JobRequest, placements: tuple[ReplicaPlacement, ...] | list,
                  gpu_types: dict) -> bool:
    """Would this run fail for lack of GPU memory (a baseline put it on too small a card)?"""
    need = job.min_gpu_memory_gb
    if need <= 0:
        return False
    for p in placements:
        t = gpu_types.get(p.gpu_type) if p.gpu_type else None
        if t is None:
            continue
        if p.share > 0:
            if p.share_memory_gb + 1e-9 < need:
                return True
        elif p.mig:
            for _dev, _idx, prof in p.mig:
                mp = t.mig_profiles.get(prof)
                if mp is not None and mp.memory_gb + 1e-9 < need:
                    return True
        elif t.memory_gb + 1e-9 < need:
            return True
    return False
