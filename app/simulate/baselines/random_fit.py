"""The FGD paper simulator's Random: a uniformly random node among those that fit.

One rule (:func:`draw`), in the two shapes the two protocols ask for:

* :func:`random_fit` (``gpuq simulate --policy random``): a policy
  ``Snapshot -> CycleResult`` on the type-aware FIFO queue
  (:func:`.fifo.fifo_policy`); each replica on a random feasible node, drawn
  from a generator seeded by the snapshot time and the job id, so a replay
  is deterministic.
* :class:`RandomPolicy` (``--protocol fill --policy random``): the fill
  protocol offers one pod at a time (:mod:`app.simulate.fill`); a random
  node that fits, a random card that fits for a shared pod, the
  lowest-index free cards for whole ones (the paper simulator's choice),
  drawn from the harness's seeded generator.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

from app.scheduling.model import CycleResult, JobRequest, ReplicaPlacement, Snapshot
from app.scheduling.state import ClusterState
from app.simulate.baselines.fifo import fifo_policy
from app.simulate.fill_state import Choice, FillCluster, FillPod, SeededChoice, cards_for

T = TypeVar("T")


def draw(rng: random.Random, options: Sequence[T]) -> T:
    """One of ``options``, uniformly (what ``rng.choice`` draws)."""
    return options[rng.randrange(len(options))]


def random_fit(snap: Snapshot) -> CycleResult:
    """The paper's Random: a uniformly random feasible node (seeded by time and job id)."""

    def choose(job: JobRequest, options: list[ReplicaPlacement], _s: ClusterState):
        rng = random.Random(f"{snap.now!r}:{job.id}:{len(options)}")
        return draw(rng, options)

    return fifo_policy(snap, typed=True, choose=choose)


class RandomPolicy(SeededChoice):
    name = "random"

    def choose(self, pod: FillPod, cl: FillCluster) -> Choice:
        nodes = [i for _, idx in cl.feasible(pod) for i in idx]
        if not nodes:
            return None
        i = draw(self.rng, nodes)
        return i, cards_for(pod, cl.free[i], lambda fits: draw(self.rng, fits))
