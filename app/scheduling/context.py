"""What placement needs to know besides the cluster state.

:class:`PlacementContext` is built once per cycle (``from_snapshot``) or
once per simulation (the fill protocol builds it by hand) and then reused
for every job, so placing a job never rebuilds anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from app.scheduling.fragmentation import WorkloadMix, with_gpuq_terms
from app.scheduling.mix import mix_from_jobs
from app.scheduling.model import GpuType, JobRequest, PoolInfo, SchedulerConfig, Snapshot

EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Hold:
    """Capacity on one node kept for a reservation.

    ``cards``/``cpu``/``memory_gb`` are what the reserved job needs there
    out of what is free now; ``full`` holds the whole node (MIG/share
    reservations). Jobs expected to finish by ``start`` may use it.
    """

    job_id: str
    start: float
    cards: int = 0
    cpu: float = 0.0
    memory_gb: float = 0.0
    full: bool = False


@dataclass(slots=True)
class PlacementContext:
    gpu_types: Mapping[str, GpuType]
    pools: Mapping[str, PoolInfo] = field(default_factory=dict)
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    mix: WorkloadMix = field(default_factory=WorkloadMix)
    now: float = 0.0
    holds: dict[str, Hold] = field(default_factory=dict)
    # what a typical future GPU job needs per card (headroom score); derived if 0
    cpu_per_gpu: float = 0.0
    memory_per_gpu: float = 0.0
    max_memory_gb: float = 0.0
    # the GPU types do not all run at the same speed (GpuType.speed): speed-aware placement
    # applies to jobs without their own table too
    typed_speeds: bool = False
    _pref: dict[tuple[str, str | None], float] = field(default_factory=dict)
    # (request shape, GPU type) -> node state -> score, None where the state does not fit;
    # valid while mix, config and pools are (see placement._state_candidates). Placement
    # fills it; nobody else should.
    score_cache: dict[tuple, dict[tuple, float | None]] = field(default_factory=dict)
    # (what placement.OPTION_READS reads of a request) -> (allowed types, mode, CU total,
    # options), for the gpu_types and pools under the key None. Placement fills it.
    options_cache: dict[tuple | None, tuple] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.max_memory_gb <= 0:
            self.max_memory_gb = max((t.memory_gb for t in self.gpu_types.values()), default=1.0)
        if self.cpu_per_gpu <= 0 or self.memory_per_gpu <= 0:
            cpu, mem = per_gpu_needs(self.mix)
            self.cpu_per_gpu = self.cpu_per_gpu or cpu
            self.memory_per_gpu = self.memory_per_gpu or mem

    @classmethod
    def from_snapshot(cls, snap: Snapshot, mix: WorkloadMix | None = None) -> PlacementContext:
        cards: dict[str, float] = {}
        for n in snap.nodes:
            if n.devices and n.gpu_type:
                cards[n.gpu_type] = cards.get(n.gpu_type, 0.0) + len(n.devices)
        cfg = snap.config
        if mix is None:
            mix = with_gpuq_terms(mix_from_jobs(snap.pending), cards,
                                  w_balance=cfg.w_balance, w_type=cfg.w_type_pressure)
        return cls(
            gpu_types=snap.gpu_types,
            pools=snap.pools,
            config=snap.config,
            mix=mix,
            now=snap.now,
            typed_speeds=len({t.speed for t in snap.gpu_types.values()}) > 1,
        )

    def type_preference(self, pool: str, gpu_type: str | None) -> float:
        """1 for the pool's first listed type down towards 0 for its last; 0 if unlisted."""
        key = (pool, gpu_type)
        v = self._pref.get(key)
        if v is None:
            p = self.pools.get(pool)
            names = list(p.gpu_types) if p else []
            v = 1.0 - names.index(gpu_type) / len(names) if gpu_type in names else 0.0
            self._pref[key] = v
        return v

    def may_use_hold(self, job: JobRequest, hold: Hold) -> bool:
        """Backfill rule: only a job expected to end before the reservation starts (by its
        estimate, else its prediction: ``JobRequest.expected_s``)."""
        if hold.job_id == job.id:
            return True
        d = job.expected_s
        return d is not None and self.now + d <= hold.start + EPS


def per_gpu_needs(mix: WorkloadMix) -> tuple[float, float]:
    """CPU and memory per card of a small future GPU job: the lower quartile of the mix.

    A low quantile because the question headroom asks is "could *some*
    job still use the free cards", not "could the average one".
    """
    cpu: list[tuple[float, float]] = []
    mem: list[tuple[float, float]] = []
    for e in mix.entries:
        cards = e.gpus if e.gpus > 0 else e.gpu_share
        if cards <= 0:
            continue
        cpu.append((e.cpu / cards, e.weight))
        mem.append((e.memory_gb / cards, e.weight))
    return _quantile(cpu, 0.25, 1.0), _quantile(mem, 0.25, 1.0)


def _quantile(values: list[tuple[float, float]], q: float, default: float) -> float:
    if not values:
        return default
    values.sort()
    total = sum(w for _, w in values)
    acc = 0.0
    for v, w in values:
        acc += w
        if acc >= q * total - EPS:
            return max(v, 1e-3)
    return max(values[-1][0], 1e-3)
