"""Scores: how good is this feasible placement of one replica (higher is better).

Each term is roughly in [0, 1] and multiplied by its weight from
:class:`~app.scheduling.model.SchedulerConfig`, so weights mean the same
thing whichever term they tune.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from app.scheduling.capacity_index import NodeCapacity
from app.scheduling.context import PlacementContext
from app.scheduling.demands import Demand
from app.scheduling.fragmentation import fragmentation_delta
from app.scheduling.job_reads import reads_job
from app.scheduling.model import GpuType, JobRequest, Node, ReplicaPlacement
from app.scheduling.modes import MODE_FIELDS
from app.scheduling.node_reads import reads

EPS = 1e-9


def demand_fraction(demand: Demand, gpu_type: GpuType | None) -> float:
    """How many cards' worth of the node the demand takes."""
    return demand.how.fraction(demand, gpu_type)


def memory_waste(job: JobRequest, demand: Demand, ctx: PlacementContext) -> float:
    """Unused GPU memory handed out, relative to the largest card (0 when no need is stated)."""
    if job.min_gpu_memory_gb <= 0 or not demand.how.on_card:
        return 0.0
    return max(0.0, demand.memory_gb - job.min_gpu_memory_gb) / ctx.max_memory_gb


def speed_gain(job: JobRequest, gpu_type: str,
               gpu_types: Mapping[str, GpuType] | None = None) -> float:
    """The job's speed on ``gpu_type`` over its best speed (1.0: its fastest type).

    The job's own table when it has one (a type missing from it runs at speed 1,
    the simulator's rule), else the operator's speed per type (``GpuType.speed``,
    the same for every job: known to the live gpuq and to every baseline). When
    every type runs at the same speed, nothing is gained anywhere (0.0: the term
    is off).
    """
    if job.speed:
        best = max(1.0, *(v for _, v in job.speed))
        own = next((v for t, v in job.speed if t == gpu_type), 1.0)
        return own / best
    if not gpu_types:
        return 0.0
    best = max(t.speed for t in gpu_types.values())
    gt = gpu_types.get(gpu_type)
    if gt is None or best <= 0 or all(t.speed == best for t in gpu_types.values()):
        return 0.0
    return gt.speed / best


def stranded_cards(free_cards: int, cpu_free: float, mem_free: float, ctx: PlacementContext) -> int:
    """Free cards that a small future job could not use for lack of CPU or memory."""
    if free_cards <= 0:
        return 0
    by_cpu = math.floor((cpu_free + EPS) / ctx.cpu_per_gpu)
    by_mem = math.floor((mem_free + EPS) / ctx.memory_per_gpu)
    return max(0, free_cards - min(by_cpu, by_mem))


@reads("cards", "cpu", "memory")
def headroom_penalty(
    demand: Demand, node: Node, cap: NodeCapacity, placement: ReplicaPlacement,
    ctx: PlacementContext,
) -> float:
    """Do not leave a node with free GPUs but not enough CPU/memory to use them.

    Charged only for what this placement strands (cards already stranded
    before it are not its fault); CPU-only work on a GPU node pays a little
    extra so it goes to CPU nodes first.
    """
    n = cap.n_devices
    if n == 0:
        return 0.0
    how = demand.how
    taken = how.whole_taken(demand)
    before = stranded_cards(cap.free_whole, node.cpu_free, node.memory_free_gb, ctx)
    after = stranded_cards(
        cap.free_whole - taken, node.cpu_free - placement.cpu,
        node.memory_free_gb - placement.memory_gb, ctx,
    )
    extra = after - before
    penalty = (0.5 + extra / n) if extra > 0 else 0.0
    if not how.on_card:
        penalty += 0.25 * placement.cpu / max(node.cpu, EPS)
    return penalty


@reads("cards", "cpu")  # name and rack only relative to a gang (see node_reads)
@reads_job(  # the demand it scores carries the mode and size (every mode's fields)
    *MODE_FIELDS, "pool", "placement", "cpu", "memory_gb", "min_gpu_memory_gb", "tolerations",
    "speed", "gpu_types", "avoid_gpu_types",
)
def score(
    job: JobRequest,
    demand: Demand,
    node: Node,
    cap: NodeCapacity,
    placement: ReplicaPlacement,
    ctx: PlacementContext,
    gang_nodes: dict[str, int],
    gang_racks: set[str],
) -> float:
    cfg = ctx.config
    gt = ctx.gpu_types.get(demand.gpu_type) if demand.gpu_type else None
    s = 0.0
    s -= cfg.w_memory_waste * memory_waste(job, demand, ctx)
    if demand.gpu_type is not None:
        s += cfg.w_type_preference * ctx.type_preference(job.pool, demand.gpu_type)
    # binpack / spread: the node's allocated share after placing
    if cap.n_devices:
        after = cap.used_frac + demand_fraction(demand, gt) / cap.n_devices
    else:
        after = (node.cpu_used + placement.cpu) / max(node.cpu, EPS)
    if job.placement == "spread":
        s -= cfg.w_spread * after
    else:
        s += cfg.w_binpack * after
    # topology: keep a gang on few nodes and racks
    if gang_nodes:
        if node.name in gang_nodes:
            s += cfg.w_topology
        elif node.rack is not None and node.rack in gang_racks:
            s += 0.5 * cfg.w_topology
    if cfg.w_headroom:
        s -= cfg.w_headroom * headroom_penalty(demand, node, cap, placement, ctx)
    if cfg.w_fragmentation and ctx.mix.entries and cap.n_devices:
        # CPU-only work on a GPU node fragments it too (its free CPU and memory
        # decide which future GPU jobs still fit), so it is charged against the
        # node's own type
        ft = gt if gt is not None else ctx.gpu_types.get(node.gpu_type or "")
        if ft is not None:
            s -= cfg.w_fragmentation * fragmentation_delta(node, ft, placement, ctx.mix)
    return s
