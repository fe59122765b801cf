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

from gpuq.scheduling.capacity_index import CapacityIndex
from gpuq.scheduling.context import PlacementContext
from gpuq.scheduling.filters import FAST_NETWORKS, allowed_type_names, allowed_types
from gpuq.scheduling.model import GpuType, JobRequest, Node, Snapshot
from gpuq.scheduling.modes import replica_options
from gpuq.scheduling.verdicts import Reason, ReasonCode

EPS = 1e-9


@dataclass(slots=True)
class TypeCapacity:
    nodes: int = 0
    cards: int = 0
    max_cards: int = 0
    fast_cards: int = 0
    max_cpu: float = 0.0
    max_memory_gb: float = 0.0
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

    @classmethod
    def of(cls, nodes: Sequence[Node], *, schedulable_only: bool = False) -> StaticCapacity:
        """The capacity of ``nodes`` with nothing running: all of them (what
        could ever fit), or only the schedulable ones (what could fit today)."""
        by_type: dict[str, TypeCapacity] = {}
        max_cpu = max_mem = cpu_cpu = cpu_mem = 0.0
        off: list[str] = []
        for n in nodes:
            if not n.schedulable:
                if schedulable_only:
                    continue
                off.append(n.name)
            max_cpu = max(max_cpu, n.cpu)
            max_mem = max(max_mem, n.memory_gb)
            if n.gpu_type is None:
                cpu_cpu, cpu_mem = max(cpu_cpu, n.cpu), max(cpu_mem, n.memory_gb)
            if not n.devices or n.gpu_type is None:
                continue
            tc = by_type.setdefault(n.gpu_type, TypeCapacity())
            whole = sum(1 for d in n.devices if not d.mig_layout and not d.external)
            tc.nodes += 1
            tc.cards += whole
            tc.max_cards = max(tc.max_cards, whole)
            if n.network in FAST_NETWORKS:
                tc.fast_cards += whole
            tc.max_cpu = max(tc.max_cpu, n.cpu)
            tc.max_memory_gb = max(tc.max_memory_gb, n.memory_gb)
            cut = sum(1 for d in n.devices if d.mig_layout)
            tc.node_caps.append((n.name, whole, cut, n.cpu, n.memory_gb))
            shape = (whole, n.cpu, n.memory_gb)
            tc.shapes[shape] = tc.shapes.get(shape, 0) + 1
            for d in n.devices:
                for p in d.mig_layout:
                    tc.mig_slices[p] = tc.mig_slices.get(p, 0) + 1
        return cls(by_type, max_cpu, max_mem, tuple(off), cpu_cpu, cpu_mem)


def _types_text(job: JobRequest, names: Sequence[str]) -> str:
    return "|".join(names) if names else "none"


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
    mode = job.mode
    if mode == "gpus" and not job.gpus:
        if ctx.config.cpu_jobs_on_gpu_nodes:
            return None
        if not static.cpu_node_max_cpu:
            return ("a job without GPUs runs on CPU-only nodes and the cluster has none "
                    "(or set scheduler.cpu_jobs_on_gpu_nodes: true to let such jobs use GPU "
                    "nodes)")
        if (job.cpu > static.cpu_node_max_cpu + EPS
                or job.memory_gb > static.cpu_node_max_memory_gb + EPS):
            return (
                f"no CPU-only node has {job.cpu:g} CPU and {job.memory_gb:g} GB memory per "
                f"replica (largest: {static.cpu_node_max_cpu:g} CPU, "
                f"{static.cpu_node_max_memory_gb:g} GB); jobs without GPUs run on CPU-only "
                "nodes")
        return None
    names = allowed_type_names(job, ctx.gpu_types, ctx.pools)
    if not names:
        return (
            f"no GPU type is allowed (job types: {', '.join(job.gpu_types) or 'any'}, "
            f"pool {job.pool}, avoided: {', '.join(job.avoid_gpu_types) or 'none'})"
        )
    types = allowed_types(job, ctx.gpu_types, ctx.pools)
    present = [t for t in types if t.name in static.by_type]
    if mode == "gpus":
        if not types:
            return (
                f"no allowed GPU type has >= {job.min_gpu_memory_gb:g} GB memory "
                f"(allowed: {', '.join(names)})"
            )
        k = job.gpus or 0
        if not present:
            return (
                f"no node has a GPU of an allowed type with >= {job.min_gpu_memory_gb:g} GB "
                f"(types that would fit: {', '.join(t.name for t in types)}; "
                f"nodes have: {', '.join(sorted(static.by_type)) or 'no GPUs'})"
            )
        # replicas each node could hold at once: whole cards, CPU and memory of the same
        # node, per distinct node shape (counted), then per node only for the message
        per_shape = [(_slots(job, k, *shape), n) for t in present
                     for shape, n in static.by_type[t.name].shapes.items()]
        most = max((x for x, _ in per_shape), default=0)
        total = sum(x * n for x, n in per_shape)
        m = job.min_available
        same_node = job.topology == "same_node" and m > 1
        if most > 0 and (most >= m if same_node else total >= m):
            return None
        caps = [c for t in present for c in static.by_type[t.name].node_caps]
        slots = {name: _slots(job, k, whole, cpu, mem) for name, whole, _c, cpu, mem in caps}
        if not any(slots.values()):
            return (
                f"no node of {_types_text(job, [t.name for t in types])} has {k} whole GPU(s) "
                f"with {job.cpu:g} CPU and {job.memory_gb:g} GB memory"
                f"{_mig_note(caps, k)}"
            )
        if same_node:
            if max(slots.values()) < m:
                return (
                    f"same_node needs {m} x {k} GPU(s) (with {m * job.cpu:g} CPU, "
                    f"{m * job.memory_gb:g} GB memory) on one node; the largest holds "
                    f"{max(slots.values())} replica(s)"
                )
        elif sum(slots.values()) < m:
            return (
                f"needs {m} replicas x {k} whole {_types_text(job, [t.name for t in present])} "
                f"GPU(s) at once; the whole cluster holds at most {sum(slots.values())} "
                f"({_holders(caps, slots)})"
            )
        return None
    if mode == "mig":
        options = replica_options(job, types)
        if not options:
            if job.mig != "auto":
                mem = (f" with >= {job.min_gpu_memory_gb:g} GB" if job.min_gpu_memory_gb
                       else "")  # ("with >= 0 GB" was noise)
                return f"MIG profile {job.mig}{mem} is not defined for {', '.join(names)}"
            return f"no MIG slice or card of {', '.join(names)} has >= {job.min_gpu_memory_gb:g} GB"
        for d in options:
            tc = static.by_type.get(d.gpu_type or "")
            if tc is None:
                continue
            if d.kind == "mig" and tc.mig_slices.get(d.profile, 0) > 0:
                return None
            if d.kind == "whole" and tc.cards > 0:
                return None
        if job.mig == "auto":
            return (
                f"no node has a MIG slice or whole card of {', '.join(names)} with "
                f">= {job.min_gpu_memory_gb:g} GB"
            )
        having = [t.name for t in types if job.mig in t.mig_profiles] or names
        return (
            f"no node's MIG layout has a {job.mig} slice (types defining it: "
            f"{', '.join(having)}); ask for mig: auto or another profile"
        )
    if mode == "gpu_share":
        if not any(t.shareable for t in types):
            return (
                f"gpu_share needs a shareable GPU type; allowed types "
                f"({', '.join(names)}) are not shareable"
                + (f" or lack {job.min_gpu_memory_gb:g} GB" if job.min_gpu_memory_gb else "")
                + "; ask for a whole card (gpus: 1)"
                + (" or a MIG slice (mig: auto)" if any(t.mig_profiles for t in types) else "")
                + " instead"
            )
        if not any(t.shareable and t.name in static.by_type for t in types):
            return "no node has a shareable GPU of an allowed type"
        return None
    if mode == "gpu_units":
        units = job.gpu_units or 0.0
        per_type = {t.name: static.by_type[t.name].cards * t.weight for t in present}
        best = sum(per_type.values()) if job.allow_mixed_types else max(
            per_type.values(), default=0.0)
        if best + EPS < units:
            return (
                f"gpu_units {units:g} CU exceeds what the cluster has of "
                f"{', '.join(names)} ({best:g} CU"
                f"{'' if job.allow_mixed_types else ' of one type; set allow_mixed_types'})"
            )
    return None


def _slots(job: JobRequest, k: int, whole: int, cpu: float, mem: float) -> int:
    """Replicas of ``k`` whole cards one empty node could hold at once."""
    n = whole // k
    if job.cpu > EPS:
        n = min(n, int((cpu + EPS) // job.cpu))
    if job.memory_gb > EPS:
        n = min(n, int((mem + EPS) // job.memory_gb))
    return max(0, n)


def _mig_note(caps: Sequence[tuple[str, int, int, float, float]], k: int) -> str:
    cut = [(name, whole, c) for name, whole, c, _cpu, _mem in caps if c and whole + c >= k]
    if not cut:
        return ""
    name, whole, c = max(cut, key=lambda x: (x[1] + x[2], x[0]))
    return f" ({name} has {whole} whole + {c} cut into MIG slices)"


def _holders(caps: Sequence[tuple[str, int, int, float, float]], slots: dict[str, int]) -> str:
    parts = []
    for name, whole, cut, _cpu, _mem in sorted(caps, key=lambda c: (-slots[c[0]], c[0]))[:4]:
        mig = f" + {cut} MIG-cut" if cut else ""
        # ("a100-1: 1 (8 whole card(s))" left the 1 unexplained)
        parts.append(f"{name} holds {slots[name]} with {whole} whole card(s){mig}")
    return "; ".join(parts)


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


_TOPOLOGY_WHERE = {
    "same_rack": " within one rack",
    "fast_network": " on one node or on fast-network (ib/roce) nodes",
}


def _gang_blocks(
    job: JobRequest, k: int, types: Sequence[GpuType], index: CapacityIndex
) -> str | None:
    """Why too few ``k``-card blocks are free for ``min_available`` replicas,
    counted as the placement counts them (None: enough are free): a gang
    takes all its replicas of one GPU type unless ``allow_mixed_types``, and
    a ``spread`` gang one replica per node. Summing the blocks of every type
    once told a gang that could not mix types that blocks existed "but not
    with CPU and memory free", which was never why it waited."""
    m = job.min_available
    spread = job.placement == "spread" and job.replicas > 1
    slots = {t.name: index.replica_slots(t.name, k, spread) for t in types}
    one_type = job.replicas > 1 and not job.allow_mixed_types and len(slots) > 1
    n = max(slots.values(), default=0) if one_type else sum(slots.values())
    if n >= m:
        return None
    if m <= 1:
        return ""
    what = f"nodes with {k} free card(s)" if spread else f"free {k}-card blocks"
    if not one_type:
        text = f"; {what}: {n} of {m} needed"
    else:
        per = ", ".join(f"{name} {s}" for name, s in slots.items())
        text = (f"; {what} of one GPU type: at most {n} of {m} needed ({per}; a gang "
                "does not mix types unless allow_mixed_types)")
    return text + (" (spread: one replica per node)" if spread else "")


def capacity_reason(job: JobRequest, index: CapacityIndex, ctx: PlacementContext) -> Reason:
    """What is missing now, from the index (cheap: no node scan): ``CAPACITY``
    (``HOST_RESOURCES`` for a job without GPUs)."""
    code = (ReasonCode.HOST_RESOURCES if job.mode == "gpus" and not job.gpus
            else ReasonCode.CAPACITY)
    return Reason(code, _capacity_text(job, index, ctx), {"mode": job.mode, "pool": job.pool})


def _capacity_text(job: JobRequest, index: CapacityIndex, ctx: PlacementContext) -> str:
    types = allowed_types(job, ctx.gpu_types, ctx.pools)
    mem = f" (>= {job.min_gpu_memory_gb:g} GB)" if job.min_gpu_memory_gb else ""
    gang = f"{job.min_available} replicas x " if job.min_available > 1 else ""
    topo = f", topology {job.topology}" if job.topology != "none" and job.min_available > 1 else ""
    mode = job.mode
    if mode == "gpus" and not job.gpus:
        return (
            f"needs {gang}{job.cpu:g} CPU and {job.memory_gb:g} GB memory on one node; "
            "no node has that free"
        )
    if mode == "gpus":
        k = job.gpus or 0
        m = job.min_available
        free = ", ".join(f"{t.name} {index.max_free_whole(t.name)}" for t in types)
        head = f"needs {gang}{k} x {_types_text(job, [t.name for t in types])}{mem} per replica"
        if job.topology == "same_node" and m > 1:  # the whole gang on one node
            if not any(index.max_free_whole(t.name) >= k * m for t in types):
                return f"{head}; largest free block: {free}{topo}"
        else:
            blocks = _gang_blocks(job, k, types, index)
            if blocks is not None:
                return f"{head}; largest free block: {free}{blocks}{topo}"
        where = _TOPOLOGY_WHERE.get(job.topology, "") if m > 1 else ""
        return (
            f"{head}; free GPU blocks exist ({free}) but not{where} with {job.cpu:g} CPU and "
            f"{job.memory_gb:g} GB memory free on the same node, or they are reserved"
        )
    if mode == "gpu_units":
        free = ", ".join(
            f"{t.name} {index.free_whole_total(t.name)} cards" for t in types
        )
        return (
            f"needs {job.gpu_units:g} CU of {_types_text(job, [t.name for t in types])}"
            f"{' (one type)' if not job.allow_mixed_types else ''}; free: {free}{topo}"
        )
    if mode == "mig":
        opts = replica_options(job, types)
        parts = []
        for d in opts[:4]:
            if d.kind == "mig":
                n = index.mig_free_total(d.gpu_type or "", d.profile)
                parts.append(f"{d.gpu_type} {d.profile}: {n}")
            else:
                parts.append(f"{d.gpu_type} whole: {index.free_whole_total(d.gpu_type or '')}")
        return f"needs {gang}{job.mig} MIG{mem}; free: {', '.join(parts) or 'none'}{topo}"
    shareable = [t for t in types if t.shareable]
    return (
        f"needs {gang}a {job.gpu_share:g} share of {_types_text(job, [t.name for t in shareable])}"
        f"{mem}; no card has that much share and memory free{topo}"
    )


def could_fit(jobs: Sequence[JobRequest], snap: Snapshot) -> dict[str, Reason | None]:
    """Job id -> why it still can never fit (None: it could now), judged on the
    snapshot's full inventory: the re-check of ``unschedulable`` jobs when the
    cluster changed (a node added, uncordoned, relabelled, its MIG layout cut
    anew) and of an admin's requeue."""
    static = StaticCapacity.of(snap.nodes)
    ctx = PlacementContext(gpu_types=snap.gpu_types, pools=snap.pools)
    return {j.id: never_fits(j, static, ctx) for j in jobs}
