"""The fill protocol's cluster: free capacity in the trace's integer units.

Every fill policy (the baselines' Random, BestFit and FGD, and the live
core's adapter) chooses on this state; :mod:`app.simulate.fill` offers the
pods and records the curve. Nodes with the same state (type, sorted free
milli per card, free CPU, free memory) form one group, so a policy scores
each distinct state once per pod.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.simulate.alibaba import TraceNode, TracePod

MILLI = 1000

Sig = tuple[str, tuple[int, ...], int, int]  # (model, free per card high->low, cpu, mem)
Choice = tuple[int, list[int]] | None  # (node index, cards) or None: the pod is dropped


@dataclass(slots=True)
class FillPod:
    name: str
    cpu: int
    mem: int
    num: int
    milli: int
    spec: frozenset[str] | None

    @property
    def total(self) -> int:
        return self.num * self.milli

    @classmethod
    def of(cls, p: TracePod, name: str | None = None) -> FillPod:
        return cls(
            name or p.name,
            p.cpu_milli,
            p.memory_mib,
            p.num_gpu,
            p.gpu_milli,
            frozenset(p.gpu_spec) if p.gpu_spec else None,
        )


class FillCluster:
    """Free capacity per node plus the nodes grouped by identical state."""

    def __init__(self, nodes: list[TraceNode]) -> None:
        self.names = [n.name for n in nodes]
        self.models = [n.model for n in nodes]
        self.cpu = [n.cpu_milli for n in nodes]  # free CPU (milli)
        self.mem = [n.memory_mib for n in nodes]  # free memory (MiB)
        self.cpu_cap = list(self.cpu)
        self.free = [[MILLI] * n.gpus for n in nodes]
        self.capacity_milli = sum(n.gpus for n in nodes) * MILLI
        self.allocated_milli = 0
        self.groups: dict[Sig, list[int]] = {}
        self.sig: list[Sig] = []
        for i in range(len(nodes)):
            s = self._make_sig(i)
            self.sig.append(s)
            self.groups.setdefault(s, []).append(i)

    def _make_sig(self, i: int) -> Sig:
        return (self.models[i], tuple(sorted(self.free[i], reverse=True)), self.cpu[i], self.mem[i])

    def feasible(self, pod: FillPod) -> list[tuple[Sig, list[int]]]:
        out = []
        num, milli, cpu, mem, spec = pod.num, pod.milli, pod.cpu, pod.mem, pod.spec
        for s, idx in self.groups.items():
            model, free, c, m = s
            if c < cpu or m < mem:
                continue
            if num:
                if num > len(free) or free[num - 1] < milli:
                    continue
                if spec is not None and model not in spec:
                    continue
            out.append((s, idx))
        return out

    def place(self, i: int, gpus: list[int], pod: FillPod) -> None:
        old = self.sig[i]
        grp = self.groups[old]
        grp.remove(i)
        if not grp:
            del self.groups[old]
        self.cpu[i] -= pod.cpu
        self.mem[i] -= pod.mem
        for g in gpus:
            if self.free[i][g] < pod.milli:
                raise AssertionError(f"over-allocation on {self.names[i]} gpu {g}")
            self.free[i][g] -= pod.milli
        if self.cpu[i] < 0 or self.mem[i] < 0:
            raise AssertionError(f"over-allocation of CPU/memory on {self.names[i]}")
        self.allocated_milli += pod.total
        new = self._make_sig(i)
        self.sig[i] = new
        grp = self.groups.setdefault(new, [])
        grp.append(i)
        if len(grp) > 1 and grp[-2] > i:
            grp.sort()


def cards_for(pod: FillPod, free: list[int], share_card: Callable[[list[int]], int]) -> list[int]:
    """The cards ``pod`` takes on the chosen node (free milli per card ``free``): none
    for a CPU pod; for a shared pod the card ``share_card`` picks among those that fit;
    else the lowest-index fully free cards (the paper simulator's exclusive choice)."""
    if pod.num == 0:
        return []
    if pod.milli < MILLI:
        return [share_card([g for g, x in enumerate(free) if x >= pod.milli])]
    return [g for g, x in enumerate(free) if x == MILLI][: pod.num]


class SeededChoice:
    """A fill policy that breaks ties with the harness's seeded generator (``choose``
    returns the node index and cards, or None to drop the pod)."""

    name = ""

    def __init__(self, rng: random.Random, **_: Any) -> None:
        self.rng = rng

    def choose(self, pod: FillPod, cl: FillCluster) -> Choice:  # pragma: no cover - abstract
        raise NotImplementedError
