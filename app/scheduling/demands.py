"""What one replica takes on a node: the request modes turned into demands.

A :class:`Demand` is mode-free: N whole cards, one MIG slice, one vGPU
share, or nothing (CPU-only) of one GPU type, with its CU and the GPU
memory it hands out. Each request mode lists the demands a replica may be
satisfied with, cheapest first (``options`` in :mod:`app.scheduling.modes`);
``unit_combos`` does the ``gpu_units`` arithmetic (least CU overshoot).

What differs between the kinds of demand (which nodes the capacity index offers,
what one takes on a node, what it counts as for the scores and beside a held
node) is one :class:`DemandKind` object per kind (:data:`KINDS`, ``Demand.how``):
placement and the scores ask it instead of comparing the kind's name.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal

from app.scheduling.filters import pick_mig, pick_share, pick_whole
from app.scheduling.model import GpuType, JobRequest, Node, ReplicaPlacement

if TYPE_CHECKING:  # annotations only
    from app.scheduling.capacity_index import CapacityIndex
    from app.scheduling.reasons import TypeCapacity

EPS = 1e-9

Kind = Literal["none", "whole", "mig", "share"]


@dataclass(frozen=True, slots=True)
class Demand:
    gpu_type: str | None
    kind: Kind
    count: int = 0
    profile: str = ""
    share: float = 0.0
    units: float = 0.0  # CU per replica
    memory_gb: float = 0.0  # GPU memory handed out (per card for whole cards)
    share_memory_gb: float = 0.0  # memory charged to a shared card
    # what this kind of demand does (one object per kind), looked up once: placement
    # asks it for every node it tries
    how: DemandKind = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "how", KINDS[self.kind])


def share_memory(gpu_type: GpuType, share: float, min_gpu_memory_gb: float) -> float:
    """A share gets its fraction of the card's memory, or the job's minimum if higher."""
    return max(share * gpu_type.memory_gb, min_gpu_memory_gb)


@dataclass(frozen=True, slots=True)
class UnitCombo:
    """Cards per type for a gpu_units job, and how far it overshoots the request."""

    cards: tuple[tuple[str, int], ...]
    units: float
    overshoot: float

    @property
    def n_cards(self) -> int:
        return sum(n for _, n in self.cards)


def unit_combos(
    units: float,
    types: Sequence[GpuType],
    free_cards: Mapping[str, int],
    allow_mixed: bool,
    limit: int = 8,
) -> list[UnitCombo]:
    """Card counts that give at least ``units`` CU within the free cards, least overshoot first.

    Single-type combos always; mixed combos (enumerated with pruning over
    types by weight) only when the job allows mixing. Ties: fewer cards.
    """
    out: list[UnitCombo] = []
    for t in types:
        n = max(1, math.ceil(units / t.weight - EPS))
        if n <= free_cards.get(t.name, 0):
            out.append(UnitCombo(((t.name, n),), n * t.weight, n * t.weight - units))
    if allow_mixed and len(types) > 1:
        ordered = sorted(types, key=lambda t: -t.weight)
        best: dict[tuple[tuple[str, int], ...], UnitCombo] = {}

        def rec(i: int, remaining: float, acc: list[tuple[str, int]], budget: list[int]) -> None:
            if budget[0] <= 0:
                return
            t = ordered[i]
            free = free_cards.get(t.name, 0)
            if i == len(ordered) - 1:
                n = max(0, math.ceil(remaining / t.weight - EPS))
                if n <= free:
                    cards = tuple(c for c in [*acc, (t.name, n)] if c[1] > 0)
                    if len(cards) > 1:
                        got = sum(next(x.weight for x in ordered if x.name == nm) * k
                                  for nm, k in cards)
                        best[cards] = UnitCombo(cards, got, got - units)
                budget[0] -= 1
                return
            top = min(free, math.ceil(remaining / t.weight - EPS))
            for n in range(top, -1, -1):
                rest = remaining - n * t.weight
                if rest <= EPS:
                    cards = tuple(c for c in [*acc, (t.name, n)] if c[1] > 0)
                    if len(cards) > 1:
                        got = sum(next(x.weight for x in ordered if x.name == nm) * k
                                  for nm, k in cards)
                        best[cards] = UnitCombo(cards, got, got - units)
                    continue
                rec(i + 1, rest, [*acc, (t.name, n)], budget)

        rec(0, units, [], [5000])
        out.extend(best.values())
    out.sort(key=lambda c: (round(c.overshoot, 6), c.n_cards))
    return out[:limit]


class DemandKind:
    """What placement and the scores ask of one kind of demand."""

    name: ClassVar[Kind]
    on_card: ClassVar[bool] = True  # takes something of a card of ``Demand.gpu_type``
    by_state: ClassVar[bool] = True  # alike on every node of one capacity-index state
    # takes part of a card (a slice, a share): not counted in whole cards, so it never
    # uses a held node around the held part, and a hold made for it takes the node
    partial_card: ClassVar[bool] = True

    def whole_taken(self, d: Demand) -> int:
        """Whole cards it takes off a node."""
        return 0

    def fraction(self, d: Demand, gpu_type: GpuType | None) -> float:
        """How many cards' worth of the node it takes."""
        return 0.0

    def slots(self, d: Demand, index: CapacityIndex, job: JobRequest, need: int) -> int:
        """Replicas the index could hold at most (``need`` when it surely holds enough):
        the quick rejection before any node scan."""
        raise NotImplementedError

    def node_names(
        self, d: Demand, index: CapacityIndex, spread: bool, cpu_on_gpu_nodes: bool
    ) -> Iterable[str]:
        """Candidate nodes from the index, in placement's order."""
        raise NotImplementedError

    def take(
        self, d: Demand, node: Node, gt: GpuType | None, cpu: float, mem: float
    ) -> ReplicaPlacement | None:
        """What one replica takes on ``node`` (host and type already checked), or None."""
        raise NotImplementedError

    def in_inventory(self, d: Demand, tc: TypeCapacity) -> bool:
        """Whether the empty cluster's cards of the type could ever give it (texts)."""
        return False

    # -- what a placement of this kind holds on its node's cards (ClusterState) --
    def hold(self, node: Node, p: ReplicaPlacement, on: bool) -> None:
        """Reserve (``on``) or release what ``p`` holds on ``node``'s cards."""
        for dev in p.devices:
            node.devices[dev].whole_used = on

    def held_on(self, node: Node, p: ReplicaPlacement) -> bool:
        """The node still has the cards ``p`` holds (none of them cut into MIG slices)."""
        n = len(node.devices)
        return all(0 <= dev < n and not node.devices[dev].mig_layout for dev in p.devices)

    def cards_of(self, p: ReplicaPlacement) -> list[int]:
        """The indices of the cards ``p`` holds something of."""
        return list(p.devices)

    def free_text(self, d: Demand, index: CapacityIndex) -> str:
        """What of it is free now, for a reason's text."""
        return f"{d.gpu_type} whole: {index.free_whole_total(d.gpu_type or '')}"


class WholeKind(DemandKind):
    name = "whole"
    partial_card = False

    def whole_taken(self, d: Demand) -> int:
        return d.count

    def in_inventory(self, d: Demand, tc: TypeCapacity) -> bool:
        return tc.cards > 0

    def fraction(self, d: Demand, gpu_type: GpuType | None) -> float:
        return float(d.count)

    def slots(self, d: Demand, index: CapacityIndex, job: JobRequest, need: int) -> int:
        if need <= 1:  # one replica: is there a node with the cards (its fullest bucket)
            return 1 if index.max_free_whole(d.gpu_type or "") >= d.count else 0
        return index.replica_slots(d.gpu_type or "", d.count,
                                   job.placement == "spread" and job.replicas > 1)

    def node_names(
        self, d: Demand, index: CapacityIndex, spread: bool, cpu_on_gpu_nodes: bool
    ) -> Iterable[str]:
        return index.nodes_with_whole(d.gpu_type or "", d.count, largest_first=spread)

    def take(
        self, d: Demand, node: Node, gt: GpuType | None, cpu: float, mem: float
    ) -> ReplicaPlacement | None:
        devs = pick_whole(node, d.count)
        if devs is None:
            return None
        return ReplicaPlacement(0, node.name, d.gpu_type, devs, units=d.units, cpu=cpu,
                                memory_gb=mem)


class MigKind(DemandKind):
    name = "mig"
    by_state = False  # which slice is free differs between nodes of one state

    def fraction(self, d: Demand, gpu_type: GpuType | None) -> float:
        if gpu_type is None:
            return 0.0
        return gpu_type.mig_profiles[d.profile].compute_fraction

    def slots(self, d: Demand, index: CapacityIndex, job: JobRequest, need: int) -> int:
        return index.mig_free_total(d.gpu_type or "", d.profile)

    def in_inventory(self, d: Demand, tc: TypeCapacity) -> bool:
        return tc.mig_slices.get(d.profile, 0) > 0

    def free_text(self, d: Demand, index: CapacityIndex) -> str:
        return f"{d.gpu_type} {d.profile}: {index.mig_free_total(d.gpu_type or '', d.profile)}"

    def hold(self, node: Node, p: ReplicaPlacement, on: bool) -> None:
        for dev, idx, _profile in p.mig:
            node.devices[dev].slices_used[idx] = on

    def held_on(self, node: Node, p: ReplicaPlacement) -> bool:
        n = len(node.devices)
        return all(
            0 <= dev < n and idx < len(node.devices[dev].mig_layout)
            and node.devices[dev].mig_layout[idx] == profile
            for dev, idx, profile in p.mig
        )

    def cards_of(self, p: ReplicaPlacement) -> list[int]:
        return sorted({d for d, _, _ in p.mig})

    def node_names(
        self, d: Demand, index: CapacityIndex, spread: bool, cpu_on_gpu_nodes: bool
    ) -> Iterable[str]:
        return index.nodes_with_mig(d.gpu_type or "", d.profile)

    def take(
        self, d: Demand, node: Node, gt: GpuType | None, cpu: float, mem: float
    ) -> ReplicaPlacement | None:
        got = pick_mig(node, d.profile)
        if got is None:
            return None
        return ReplicaPlacement(0, node.name, d.gpu_type, (), mig=((got[0], got[1], d.profile),),
                                units=d.units, cpu=cpu, memory_gb=mem)


class ShareKind(DemandKind):
    name = "share"

    def fraction(self, d: Demand, gpu_type: GpuType | None) -> float:
        return d.share

    def hold(self, node: Node, p: ReplicaPlacement, on: bool) -> None:
        d = node.devices[p.devices[0]]
        if on:
            d.share_used += p.share
            d.share_memory_gb += p.share_memory_gb
        else:
            d.share_used = max(0.0, d.share_used - p.share)
            d.share_memory_gb = max(0.0, d.share_memory_gb - p.share_memory_gb)
            if d.share_used < EPS:
                d.share_used = 0.0
                d.share_memory_gb = 0.0

    def slots(self, d: Demand, index: CapacityIndex, job: JobRequest, need: int) -> int:
        return need if index.has_share(d.gpu_type or "", d.share) else 0

    def node_names(
        self, d: Demand, index: CapacityIndex, spread: bool, cpu_on_gpu_nodes: bool
    ) -> Iterable[str]:
        return index.nodes_with_share(d.gpu_type or "", d.share)

    def take(
        self, d: Demand, node: Node, gt: GpuType | None, cpu: float, mem: float
    ) -> ReplicaPlacement | None:
        assert gt is not None
        dev = pick_share(node, gt, d.share, d.share_memory_gb)
        if dev is None:
            return None
        return ReplicaPlacement(0, node.name, d.gpu_type, (dev,), share=d.share,
                                share_memory_gb=d.share_memory_gb, units=d.units, cpu=cpu,
                                memory_gb=mem)


class NoCardKind(DemandKind):
    """CPU-only: CPU-only nodes, or any node with ``scheduler.cpu_jobs_on_gpu_nodes``."""

    name = "none"
    on_card = False
    partial_card = False

    def slots(self, d: Demand, index: CapacityIndex, job: JobRequest, need: int) -> int:
        return need

    def node_names(
        self, d: Demand, index: CapacityIndex, spread: bool, cpu_on_gpu_nodes: bool
    ) -> Iterable[str]:
        yield from index.cpu_nodes
        if cpu_on_gpu_nodes:
            yield from (n for n in index.caps if n not in index.cpu_nodes)

    def take(
        self, d: Demand, node: Node, gt: GpuType | None, cpu: float, mem: float
    ) -> ReplicaPlacement | None:
        return ReplicaPlacement(0, node.name, None, (), cpu=cpu, memory_gb=mem)


KINDS: Mapping[str, DemandKind] = {k.name: k for k in (WholeKind(), MigKind(), ShareKind(),
                                                        NoCardKind())}


def held_kind(p: ReplicaPlacement) -> DemandKind:
    """The kind of what a placement holds (a running job's placements carry no demand)."""
    if p.mig:
        return KINDS["mig"]
    if p.share > 0:
        return KINDS["share"]
    return KINDS["whole"] if p.devices else KINDS["none"]
