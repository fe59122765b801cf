"""Explain: a reason a person can act on for every job left waiting.

Two kinds. ``never_fits`` compares the request with the cluster's static
capacity (what no amount of waiting will fix: it becomes
``unschedulable``). ``capacity_reason`` describes what is free now,
from the capacity index, e.g. "needs 2 x 4 x a100-80g (>= 40 GB); largest
free block: a100-80g 2, v100-16g 0".

"Never" is judged on the FULL inventory: cordoned and NotReady
nodes are still the cluster's (an upgrade ends, a node comes back), MIG-cut
cards count as their slices and not as whole cards, and CPU and memory are
those of the same node as the cards. A request that fits the full inventory
but not the schedulable part waits with a reason naming the nodes it waits
for (:func:`cordoned_reason`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from app.scheduling.capacity_index import CapacityIndex
from app.scheduling.context import PlacementContext
from app.scheduling.filters import (
    FAST_NETWORKS,
    allowed_types,
    labels_selected,
    selection_text,
)
from app.scheduling.model import JobRequest, Node, Snapshot
from app.scheduling.modes import RequestMode, mode_of
from app.scheduling.verdicts import Reason, ReasonCode

EPS = 1e-9


@dataclass(slots=True)
class TypeCapacity:
    nodes: int = 0
    cards: int = 0
    max_cards: int = 0
    fast_cards: int = 0
    max_cpu: float = 0.0
    max_memory_gb: float = 0.0
    # whole cards another workload's Pod holds (``Device.external``): counted in ``cards``
    external: int = 0
    mig_slices: dict[str, int] = field(default_factory=dict)
    # per node: (name, whole cards, cards cut into MIG slices, cpu, memory_gb)
    node_caps: list[tuple[str, int, int, float, float]] = field(default_factory=list)
    # nodes per distinct (whole cards, cpu, memory_gb): a never-fits check per request
    # shape costs the distinct node shapes, not the nodes (10,000 nodes have a few)
    shapes: dict[tuple[int, float, float], int] = field(default_factory=dict)


@dataclass(slots=True)
class StaticCapacity:
    """The cluster with nothing running: what could ever fit."""

    by_type: dict[str, TypeCapacity]
    max_cpu: float
    max_memory_gb: float
    unschedulable: tuple[str, ...] = ()  # nodes counted although cordoned / not ready
    # CPU and memory of the largest CPU-only nodes (0: none): where jobs without GPUs run
    cpu_node_max_cpu: float = 0.0
    cpu_node_max_memory_gb: float = 0.0
    # the distinct label sets of the nodes (a job's node selection must meet one); few:
    # the Kubernetes adapter passes only the labels a job may select by
    label_sets: frozenset[tuple[tuple[str, str], ...]] = frozenset()

    @classmethod
    def of(cls, nodes: Sequence[Node], *, schedulable_only: bool = False) -> StaticCapacity:
        """The capacity of ``nodes`` with nothing running: all of them (what
        could ever fit), or only the schedulable ones (what could fit today).

        A card another workload holds (``Device.external``) is part of it: that Pod
        ends, as gpuq's own do. Left out, one foreign Pod on the only node with 8 cards
        made every 8-card job ``unschedulable``, and nothing sent it back when the Pod
        ended (the re-check on a changed inventory does not look at usage), so it waited
        for an admin's requeue; it now waits ``pending`` for the cards, as kube-scheduler
        keeps such a Pod pending. A card cut into MIG slices is not a whole card."""
        by_type: dict[str, TypeCapacity] = {}
        max_cpu = max_mem = cpu_cpu = cpu_mem = 0.0
        off: list[str] = []
        label_sets: set[tuple[tuple[str, str], ...]] = set()
        for n in nodes:
            if not n.schedulable:
                if schedulable_only:
                    continue
                off.append(n.name)
            label_sets.add(tuple(sorted(n.labels.items())) if n.labels else ())
            max_cpu = max(max_cpu, n.cpu)
            max_mem = max(max_mem, n.memory_gb)
            if n.gpu_type is None:
                cpu_cpu, cpu_mem = max(cpu_cpu, n.cpu), max(cpu_mem, n.memory_gb)
            if not n.devices or n.gpu_type is None:
                continue
            tc = by_type.setdefault(n.gpu_type, TypeCapacity())
            whole = cut = 0  # cards not cut (used by anyone or not); cards cut into slices
            for d in n.devices:
                if d.mig_layout:
                    cut += 1
                    for p in d.mig_layout:
                        tc.mig_slices[p] = tc.mig_slices.get(p, 0) + 1
                else:
                    whole += 1
                    if d.external:
                        tc.external += 1
            tc.nodes += 1
            tc.cards += whole
            tc.max_cards = max(tc.max_cards, whole)
            if n.network in FAST_NETWORKS:
                tc.fast_cards += whole
            tc.max_cpu = max(tc.max_cpu, n.cpu)
            tc.max_memory_gb = max(tc.max_memory_gb, n.memory_gb)
            tc.node_caps.append((n.name, whole, cut, n.cpu, n.memory_gb))
            shape = (whole, n.cpu, n.memory_gb)
            tc.shapes[shape] = tc.shapes.get(shape, 0) + 1
        return cls(by_type, max_cpu, max_mem, tuple(off), cpu_cpu, cpu_mem,
                   frozenset(label_sets))


def never_fits(job: JobRequest, static: StaticCapacity, ctx: PlacementContext) -> Reason | None:
    """Why no cluster state could ever run this job (None if some could): a
    ``NEVER_FITS`` reason."""
    why = _never_text(job, static, ctx)
    if why is None:
        return None
    return Reason(ReasonCode.NEVER_FITS, why, {"mode": job.mode, "pool": job.pool})


def _never_text(job: JobRequest, static: StaticCapacity, ctx: PlacementContext) -> str | None:
    if job.cpu > static.max_cpu + EPS or job.memory_gb > static.max_memory_gb + EPS:
        return (
            f"no node has {job.cpu:g} CPU and {job.memory_gb:g} GB memory per replica "
            f"(largest: {static.max_cpu:g} CPU, {static.max_memory_gb:g} GB)"
        )
    if job.node_selector and not any(
        labels_selected(job.node_selector, dict(ls)) for ls in static.label_sets
    ):
        return f"no node has labels that meet {selection_text(job.node_selector)}"
    return mode_of(job).never_text(job, static, ctx)


def cordoned_reason(job: JobRequest, why: str, static: StaticCapacity) -> Reason:
    """A request that fits the full inventory but not its schedulable part waits
    for the nodes that are cordoned or not ready (``why``: what the schedulable
    nodes lack)."""
    names = ", ".join(static.unschedulable[:6])
    more = f" and {len(static.unschedulable) - 6} more" if len(static.unschedulable) > 6 else ""
    return Reason(
        ReasonCode.CORDONED,
        f"waits for nodes that are cordoned or not ready ({names}{more}): "
        f"the schedulable ones cannot hold it ({why})",
        {"nodes": static.unschedulable},
    )


def capacity_reason(job: JobRequest, index: CapacityIndex, ctx: PlacementContext) -> Reason:
    """What is missing now, from the index (cheap: no node scan): ``CAPACITY``
    (``HOST_RESOURCES`` for a job without GPUs)."""
    mode = mode_of(job)
    return Reason(mode.capacity_code, _capacity_text(mode, job, index, ctx),
                  {"mode": job.mode, "pool": job.pool})


def foreign_cards_note(reason: Reason, job: JobRequest, static: StaticCapacity,
                       ctx: PlacementContext) -> Reason:
    """A wait for cards says how many of the job's types' cards other workloads' Pods
    hold (``Device.external``): those end as gpuq's own do, but gpuq neither knows when
    nor may preempt them, so the number is what an admin asks about first."""
    if reason.code is not ReasonCode.CAPACITY:
        return reason
    by_type = static.by_type
    held = {
        t.name: by_type[t.name].external
        for t in allowed_types(job, ctx.gpu_types, ctx.pools)
        if t.name in by_type and by_type[t.name].external
    }
    if not held:
        return reason
    text = ", ".join(f"{t} {n}" for t, n in sorted(held.items()))
    return reason.extend(f"; cards held by workloads gpuq did not start: {text}",
                         foreign_cards=held)


def _capacity_text(
    mode: RequestMode, job: JobRequest, index: CapacityIndex, ctx: PlacementContext
) -> str:
    types = allowed_types(job, ctx.gpu_types, ctx.pools)
    mem = f" (>= {job.min_gpu_memory_gb:g} GB)" if job.min_gpu_memory_gb else ""
    gang = f"{job.min_available} replicas x " if job.min_available > 1 else ""
    topo = f", topology {job.topology}" if job.topology != "none" and job.min_available > 1 else ""
    text = mode.capacity_text(job, index, types, gang, mem, topo)
    if job.node_selector:  # the index counts every node of a type; the job selects some
        text += f" (only on nodes whose labels meet {selection_text(job.node_selector)})"
    return text


def could_fit(jobs: Sequence[JobRequest], snap: Snapshot) -> dict[str, Reason | None]:
    """Job id -> why it still can never fit (None: it could now), judged on the
    snapshot's full inventory: the re-check of ``unschedulable`` jobs when the
    cluster changed (a node added, uncordoned, relabelled, its MIG layout cut
    anew) and of an admin's requeue."""
    static = StaticCapacity.of(snap.nodes)
    ctx = PlacementContext(gpu_types=snap.gpu_types, pools=snap.pools)
    return {j.id: never_fits(j, static, ctx) for j in jobs}
