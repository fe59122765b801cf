"""Comparative advantage: what a GPU type is worth to a job, given who else needs it.

Speed-aware placement alone sends every job to the type where it runs
fastest. On a mixed cluster that is the wrong question: a 1-GPU job that
may run anywhere gains 2x on an A100 but takes the card from an 8-GPU gang
that can run *only* there, while the RTX 4090s that no memory-bound job
can use stand idle (measured on the Philly suite: docs/evaluation.md).
The right question is Ricardo's: where does the job gain the most
*relative to the jobs that compete for the same cards*?

The **price** of a type for a job is the share of the type's cards wanted
by jobs with fewer alternatives than this one (running and pending work
whose allowed types, after pool, ``gpu_types``, memory and sharing rules,
are fewer; each spreads its cards evenly over its types). A job's
advantage on a type is its speed gain there discounted by that price:
``gain x (1 - min(1, price))``. A type that the less flexible jobs fill
is worth nothing extra to a flexible job (it still goes there when
nothing else fits: this only ranks feasible placements); a type nobody
else can use keeps its full gain. Jobs with no alternatives pay no price.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from app.scheduling.filters import allowed_types
from app.scheduling.model import GpuType, JobRequest, PoolInfo

SAMPLE = 2000  # a huge backlog is sampled with a fixed stride, as the workload mix is

_Key = tuple


def _shape(job: JobRequest) -> _Key:
    """What decides a job's allowed types (jobs alike share one lookup)."""
    return (job.pool, job.gpu_types, job.avoid_gpu_types, job.min_gpu_memory_gb, job.mode)


def _cards(job: JobRequest) -> float:
    """Cards the job wants in all (a share as its fraction, a slice as a third)."""
    mode = job.mode
    if mode == "gpus":
        per = float(job.gpus or 0)
    elif mode == "gpu_share":
        per = float(job.gpu_share or 0.0)
    elif mode == "mig":
        per = 0.3
    elif mode == "gpu_units":
        per = 1.0
    else:
        per = 0.0
    return per * max(1, job.replicas)


@dataclass(slots=True)
class TypePrices:
    """Per type, the share of its cards wanted by jobs with k alternatives (k = 1, 2, ...)."""

    gpu_types: Mapping[str, GpuType]
    pools: Mapping[str, PoolInfo]
    # type -> {alternatives: wanted cards / the type's cards}
    shares: dict[str, dict[int, float]] = field(default_factory=dict)
    _types: dict[_Key, tuple[str, ...]] = field(default_factory=dict)

    def types_of(self, job: JobRequest) -> tuple[str, ...]:
        """The types the job may use (cached by request shape)."""
        key = _shape(job)
        names = self._types.get(key)
        if names is None:
            share = job.mode == "gpu_share"
            names = tuple(
                t.name for t in allowed_types(job, self.gpu_types, self.pools)
                if not share or t.shareable
            )
            self._types[key] = names
        return names

    def price(self, job: JobRequest, gpu_type: str) -> float:
        """Share of ``gpu_type`` wanted by jobs with fewer alternatives than ``job``."""
        by_k = self.shares.get(gpu_type)
        if not by_k:
            return 0.0
        mine = len(self.types_of(job))
        return sum(v for k, v in by_k.items() if k < mine)

    def advantage(self, job: JobRequest, gpu_type: str, gain: float) -> float:
        """``gain`` (the job's speed gain on the type) discounted by the type's price."""
        return gain * (1.0 - min(1.0, self.price(job, gpu_type)))


def type_prices(
    running: Iterable[JobRequest],
    pending: Iterable[JobRequest],
    gpu_types: Mapping[str, GpuType],
    pools: Mapping[str, PoolInfo],
    capacity_cards: Mapping[str, float],
) -> TypePrices:
    """Prices from the work the cluster holds and the queue (sampled past ``SAMPLE``)."""
    prices = TypePrices(gpu_types, pools)
    wanted: dict[str, dict[int, float]] = {}

    def add(job: JobRequest, weight: float) -> None:
        names = prices.types_of(job)
        cards = _cards(job)
        if not names or cards <= 0:
            return
        k = len(names)
        for t in names:
            by_k = wanted.setdefault(t, {})
            by_k[k] = by_k.get(k, 0.0) + weight * cards / k

    for r in running:
        add(r, 1.0)
    queue = list(pending)
    stride = max(1, len(queue) // SAMPLE)
    for j in queue[::stride]:
        add(j, float(stride))
    for t, by_k in wanted.items():
        cap = capacity_cards.get(t, 0.0)
        if cap > 0:
            prices.shares[t] = {k: v / cap for k, v in by_k.items()}
    return prices
