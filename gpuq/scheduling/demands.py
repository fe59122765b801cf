"""What one replica takes on a node: the request modes turned into demands.

A :class:`Demand` is mode-free: N whole cards, one MIG slice, one vGPU
share, or nothing (CPU-only) of one GPU type, with its CU and the GPU
memory it hands out. Each request mode lists the demands a replica may be
satisfied with, cheapest first (``options`` in :mod:`gpuq.scheduling.modes`);
``unit_combos`` does the ``gpu_units`` arithmetic (least CU overshoot).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from gpuq.scheduling.model import GpuType

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
