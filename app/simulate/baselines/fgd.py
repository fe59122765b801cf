"""FGD (Weng et al., ATC'23) as published, for the fill protocol: our re-implementation.

The node whose fragmentation of the expected workload drops the most
(integer sigmoid score, random ties, the card chosen by the same measure,
memory ignored), so gpuq is compared with FGD in the same harness too. The
expected workload is every pod shape of the (un-inflated) trace weighted by
its count (:func:`workload_model`); the fragmentation measure itself is the
core's (:class:`app.scheduling.fragmentation.FragModel`).
"""

from __future__ import annotations

import math
import random
from typing import Any

from app.scheduling.fragmentation import FragModel, IntTask
from app.simulate.alibaba import TracePod
from app.simulate.baselines.random_fit import draw
from app.simulate.fill_state import MILLI, Choice, FillCluster, FillPod, SeededChoice, cards_for


def workload_model(pods: list[TracePod], *, use_memory: bool) -> FragModel:
    """The mix: every pod shape of the (un-inflated) trace, weighted by its count
    (FGD's "typical pods" with every shape kept)."""
    counts: dict[tuple, int] = {}
    for p in pods:
        key = (p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, p.gpu_spec)
        counts[key] = counts.get(key, 0) + 1
    tasks = [
        IntTask(cpu, mem, num, milli, frozenset(spec) if spec else None, float(w))
        for (cpu, mem, num, milli, spec), w in counts.items()
    ]
    return FragModel(tasks, use_memory=use_memory)


def _after_free(free: tuple[int, ...], take: int, num: int, milli: int) -> tuple[int, ...]:
    """Sorted free list after taking ``num`` cards of value ``take`` by ``milli`` each."""
    lst = list(free)
    for _ in range(num):
        lst[lst.index(take)] -= milli
    lst.sort(reverse=True)
    return tuple(lst)


def _sigmoid_score(decrease: float) -> int:
    return int(100.0 / (1.0 + math.exp(-decrease / 1000.0)))


class FgdPolicy(SeededChoice):
    """FGD as published: integer score, random ties, memory not considered."""

    name = "fgd"

    def __init__(self, rng: random.Random, model: FragModel, **_: Any) -> None:
        super().__init__(rng)
        self.model = model

    def choose(self, pod: FillPod, cl: FillCluster) -> Choice:
        best = -1
        tied: list[tuple[int, int]] = []  # (node, card value taken)
        frag = self.model.frag
        for (model, free, cpu, mem), idx in cl.feasible(pod):
            before = frag(model, free, cpu, mem)
            if pod.num == 0:
                after = frag(model, free, cpu - pod.cpu, mem - pod.mem)
                score, take = _sigmoid_score(before - after), 0
            elif pod.milli < MILLI:
                score, take = -1, 0
                for v in sorted(set(free), reverse=True):  # paper: first card in index order
                    if v < pod.milli:
                        continue
                    after_free = _after_free(free, v, 1, pod.milli)
                    after = frag(model, after_free, cpu - pod.cpu, mem - pod.mem)
                    s = _sigmoid_score(before - after)
                    if s > score:
                        score, take = s, v
            else:
                after = frag(
                    model, _after_free(free, MILLI, pod.num, MILLI), cpu - pod.cpu, mem - pod.mem
                )
                score, take = _sigmoid_score(before - after), MILLI
            if score > best:
                best, tied = score, [(i, take) for i in idx]
            elif score == best:
                tied.extend((i, take) for i in idx)
        if not tied:
            return None
        i, take = draw(self.rng, tied)
        node_free = cl.free[i]  # a shared pod: the first card of the value it scored
        return i, cards_for(pod, node_free, lambda _fits: node_free.index(take))
