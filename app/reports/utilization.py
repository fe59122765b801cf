"""Per GPU type: capacity and allocated CU, free cards and slices, queue, idle share.

Computed from the same :class:`~app.scheduling.model.Snapshot` the
dispatcher schedules from, so what the dashboard shows is what the core
saw. Real utilization (DCGM) is an optional input: without a Prometheus
URL it stays ``None`` and the report says it is unknown, never a guess.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from app.reports.alerts import AlertThresholds, type_imbalance_alerts
from app.scheduling.model import JobRequest, PoolInfo, Snapshot
from app.scheduling.state import EPS, ClusterState

CPU_ONLY = "cpu"
ANY_TYPE = "any"


def wanted_type(job: JobRequest, pools: Mapping[str, PoolInfo]) -> str:
    """The GPU type a pending job is queued for, one per job so counts add up.

    Its first requested type, else its pool's first (preferred) type, else
    ``any``; CPU-only work is ``cpu``.
    """
    pool = pools.get(job.pool)
    return wanted_type_of(
        job.mode == "gpus" and not job.gpus,
        job.gpu_types[0] if job.gpu_types else None,
        pool.gpu_types if pool is not None else (),
    )


def wanted_type_of(cpu_only: bool, first_type: str | None, pool_types: Sequence[str]) -> str:
    """:func:`wanted_type` from the three facts it needs (aggregate queries group by them)."""
    if cpu_only:
        return CPU_ONLY
    if first_type:
        return first_type
    if pool_types:
        return pool_types[0]
    return ANY_TYPE


@dataclass(frozen=True, slots=True)
class TypeUtilization:
    gpu_type: str
    weight: float
    nodes: int
    cards: int
    capacity_cu: float
    allocated_cu: float
    allocation_ratio: float
    idle_ratio: float
    free_cards: int
    free_slices: int
    total_slices: int
    pending_jobs: int
    gpu_util: float | None = None  # mean DCGM_FI_DEV_GPU_UTIL / 100, None when unknown

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def utilization(
    snap: Snapshot,
    gpu_util: Mapping[str, float] | None = None,
    pending: Mapping[str, int] | None = None,
) -> list[TypeUtilization]:
    """One row per GPU type known to the snapshot (types without nodes show zero
    capacity); ``pending``: :func:`pending_by_type` of the snapshot, if known."""
    state = ClusterState.from_snapshot(snap)
    nodes_by_type: Counter[str] = Counter()
    cards: Counter[str] = Counter()
    free_cards: Counter[str] = Counter()
    free_slices: Counter[str] = Counter()
    total_slices: Counter[str] = Counter()
    for node in state.nodes.values():
        if node.gpu_type is None:
            continue
        t = node.gpu_type
        nodes_by_type[t] += 1
        cards[t] += len(node.devices)
        for d in node.devices:
            if d.external:
                continue
            if d.mig_layout:
                total_slices[t] += len(d.mig_layout)
                if node.schedulable:
                    free_slices[t] += sum(1 for used in d.slices_used if not used)
            elif d.is_free_whole and node.schedulable:
                free_cards[t] += 1
    allocated: dict[str, float] = defaultdict(float)
    for job in snap.running:
        for p in job.placements:
            if p.gpu_type:
                allocated[p.gpu_type] += p.units
    if pending is None:
        pending = pending_by_type(snap)
    out = []
    for name in sorted(set(snap.gpu_types) | set(cards)):
        gt = snap.gpu_types.get(name)
        weight = gt.weight if gt else 0.0
        cap = cards[name] * weight
        alloc = allocated.get(name, 0.0)
        ratio = min(1.0, alloc / cap) if cap > EPS else 0.0
        util = None if gpu_util is None else gpu_util.get(name)
        out.append(
            TypeUtilization(
                gpu_type=name,
                weight=weight,
                nodes=nodes_by_type[name],
                cards=cards[name],
                capacity_cu=cap,
                allocated_cu=alloc,
                allocation_ratio=ratio,
                idle_ratio=(1.0 - ratio) if cap > EPS else 0.0,
                free_cards=free_cards[name],
                free_slices=free_slices[name],
                total_slices=total_slices[name],
                pending_jobs=pending.get(name, 0),
                gpu_util=util,
            )
        )
    return out


def pending_counts(snap: Snapshot) -> Counter[tuple[str, str, str]]:
    """Pending jobs by (pool, priority, wanted GPU type), for the queue gauge."""
    # thousands of pending jobs share a handful of shapes: type each shape once
    shapes: Counter[tuple[str, str, bool, str | None]] = Counter(
        (j.pool, j.priority, j.mode == "gpus" and not j.gpus,
         j.gpu_types[0] if j.gpu_types else None)
        for j in snap.pending
    )
    out: Counter[tuple[str, str, str]] = Counter()
    for (pool, prio, cpu_only, first), n in shapes.items():
        info = snap.pools.get(pool)
        gpu_type = wanted_type_of(cpu_only, first, info.gpu_types if info is not None else ())
        out[(pool, prio, gpu_type)] += n
    return out


def pending_by_type(
    snap: Snapshot, counts: Mapping[tuple[str, str, str], int] | None = None
) -> dict[str, int]:
    """Pending jobs by wanted GPU type (from ``counts``, :func:`pending_counts`, if known)."""
    out: Counter[str] = Counter()
    for (_, _, gpu_type), n in (counts if counts is not None else pending_counts(snap)).items():
        out[gpu_type] += n
    return dict(out)


def borrowed_units(snap: Snapshot) -> dict[tuple[str, str, str], float]:
    """CU on loan by (borrower, lender, GPU type), from the running jobs' leases."""
    out: dict[tuple[str, str, str], float] = defaultdict(float)
    for job in snap.running:
        for lease in job.leases:
            out[(lease.borrower, lease.lender, lease.gpu_type)] += lease.units
    return dict(out)


def utilization_report(
    snap: Snapshot,
    gpu_util: Mapping[str, float] | None = None,
    *,
    thresholds: AlertThresholds | None = None,
    gpu_util_source: str | None = None,
    counts: Mapping[tuple[str, str, str], int] | None = None,
) -> dict[str, object]:
    """The body of ``GET /v1/reports/utilization`` (imbalance alert included);
    ``counts``: :func:`pending_counts` of the snapshot, if known."""
    th = thresholds or AlertThresholds()
    pending = pending_by_type(snap, counts)
    rows = utilization(snap, gpu_util, pending)
    idle = {r.gpu_type: r.idle_ratio for r in rows if r.capacity_cu > EPS}
    alerts = type_imbalance_alerts(pending, idle, th)
    return {
        "generated_at": snap.now,
        "gpu_types": [r.to_dict() for r in rows],
        "pending_other": {k: v for k, v in pending.items() if k in (CPU_ONLY, ANY_TYPE)},
        "gpu_util_source": gpu_util_source,
        "gpu_util_note": None
        if gpu_util is not None
        else "real GPU utilization unknown: set GPUQ_PROMETHEUS_URL to read DCGM-Exporter",
        "alerts": [a.to_dict() for a in alerts],
    }
