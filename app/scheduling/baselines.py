"""Baseline policies gpuq is measured against (pure: Snapshot -> CycleResult).

* ``fifo-count``: what the default Kubernetes scheduler does with
  ``nvidia.com/gpu``: one queue in submit order (no priorities, pools,
  quotas or fairness), GPUs counted without type, each job on the first
  node(s) by name that have the cards, CPU and memory. A replica
  asks for ``gpus`` whole cards; a ``gpu_share`` or ``mig`` replica for one
  whole card; a ``gpu_units`` job for ``ceil(units / mean card weight)``
  cards on one node. It ignores ``gpu_types`` and memory needs, so a job
  can land on a card with too little memory: the simulator then fails
  that run 60 s after start (out of memory) and requeues it, at most 3
  times (API.md).
* ``fifo-typed``: the same queue and first fit, but type- and
  memory-aware: only allowed types whose memory suffices, shares and MIG
  slices as requested (the core's demands and device pickers).

* ``random`` and ``bestfit``: the FGD paper simulator's Random and BestFit
  node choice (the fill protocol's definitions, :mod:`app.simulate.fill`) on
  the same type-aware FIFO queue: a uniformly random feasible node, or the
  feasible node with the least ``0.5 free CPU / max node CPU + 0.5 free GPUs
  / max node cards`` left after the placement (ties by name). Random draws
  from a generator seeded by the snapshot time and the job id, so a run is
  deterministic.

A job that does not fit is skipped, not waited for: later jobs may go
first (the default scheduler has no head-of-line blocking). Replicas are
placed all-or-nothing (``min_available``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from app.scheduling.demands import Demand, replica_options
from app.scheduling.filters import (
    allowed_types,
    node_fits_host,
    pick_mig,
    pick_share,
    pick_whole,
)
from app.scheduling.model import (
    Admission,
    CycleResult,
    JobRequest,
    Node,
    ReplicaPlacement,
    Snapshot,
)
from app.scheduling.state import ClusterState


def _fifo(snap: Snapshot) -> list[JobRequest]:
    return sorted(snap.pending, key=lambda j: (j.submitted_at, j.id))


def _count_cards(job: JobRequest, snap: Snapshot) -> int:
    mode = job.mode
    if mode == "gpus":
        return job.gpus or 0
    if mode == "gpu_units":
        weights = [t.weight for t in snap.gpu_types.values()] or [1.0]
        return max(1, math.ceil((job.gpu_units or 0.0) / (sum(weights) / len(weights)) - 1e-9))
    return 1  # a share or a MIG slice takes a whole card for the default scheduler


def _place_count(
    job: JobRequest, node: Node, snap: Snapshot, replica: int
) -> ReplicaPlacement | None:
    if not node_fits_host(node, job.cpu, job.memory_gb):
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
    if not node_fits_host(node, job.cpu, job.memory_gb):
        return None
    for d in demands:
        if d.kind == "none":
            return ReplicaPlacement(replica, node.name, None, cpu=job.cpu, memory_gb=job.memory_gb)
        if node.gpu_type != d.gpu_type:
            continue
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


def _fifo_policy(snap: Snapshot, typed: bool, choose: Chooser | None = None) -> CycleResult:
    """FIFO over the pending jobs; each replica on the first feasible node by name,
    or on the node ``choose`` picks among all feasible ones."""
    result = CycleResult()
    state = ClusterState.from_snapshot(snap)
    names = sorted(n.name for n in snap.nodes)  # by name: decisions never depend on input order
    for job in _fifo(snap):
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
            state.reserve(got)
            placed.append(got)
        if len(placed) >= need:
            result.admissions.append(Admission(job.id, tuple(placed)))
        else:
            for p in placed:
                state.unreserve(p)
            result.reasons[job.id] = "no node has the free capacity (first fit)"
    return result


def random_fit(snap: Snapshot) -> CycleResult:
    """The paper's Random: a uniformly random feasible node (seeded by time and job id)."""

    def choose(job: JobRequest, options: list[ReplicaPlacement], _s: ClusterState):
        rng = random.Random(f"{snap.now!r}:{job.id}:{len(options)}")
        return options[rng.randrange(len(options))]

    return _fifo_policy(snap, typed=True, choose=choose)


def best_fit(snap: Snapshot) -> CycleResult:
    """The paper's BestFit: the feasible node with the least CPU and GPU left after."""
    max_cpu = max((n.cpu for n in snap.nodes), default=1.0) or 1.0
    max_cards = max((len(n.devices) for n in snap.nodes), default=1) or 1

    def left(p: ReplicaPlacement, state: ClusterState) -> tuple[float, str]:
        node = state.nodes[p.node]
        free = sum(1.0 - d.share_used for d in node.devices
                   if not (d.whole_used or d.mig_layout or d.external))
        taken = len(p.devices) if p.share <= 0 else p.share
        cpu_after = node.cpu_free - p.cpu
        return (0.5 * cpu_after / max_cpu + 0.5 * (free - taken) / max_cards, p.node)

    def choose(job: JobRequest, options: list[ReplicaPlacement], state: ClusterState):
        return min(options, key=lambda p: left(p, state))

    return _fifo_policy(snap, typed=True, choose=choose)


def fifo_count(snap: Snapshot) -> CycleResult:
    """One FIFO queue, GPUs counted without type, first node that fits."""
    return _fifo_policy(snap, typed=False)


def fifo_typed(snap: Snapshot) -> CycleResult:
    """One FIFO queue, type- and memory-aware, first node that fits."""
    return _fifo_policy(snap, typed=True)


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
