"""The FGD paper simulator's BestFit: the node with the least CPU and GPU left after.

One measure (:func:`bestfit_left`), in the two shapes the two protocols ask for:

* :func:`best_fit` (``gpuq simulate --policy bestfit``): a policy
  ``Snapshot -> CycleResult`` on the type-aware FIFO queue
  (:func:`.fifo.fifo_policy`): the feasible node with the least
  ``0.5 free CPU / max node CPU + 0.5 free GPUs / max node cards`` left
  after the placement, ties by name.
* :class:`BestFitPolicy` (``--protocol fill --policy bestfit``): the paper
  simulator's score, ``0.5 (free CPU - request) / 128 CPU + 0.5 (free
  GPU-milli - request) / 8000``, quantised to the integer 0..100 node
  score of the Kubernetes framework, ties broken at random (the
  framework's ``selectHost``); a shared pod takes the fullest card that
  still fits.
"""

from __future__ import annotations

from app.scheduling.model import CycleResult, JobRequest, ReplicaPlacement, Snapshot
from app.scheduling.state import ClusterState
from app.simulate.baselines.fifo import fifo_policy
from app.simulate.baselines.random_fit import draw
from app.simulate.fill_state import Choice, FillCluster, FillPod, SeededChoice, cards_for

MAX_SPEC_CPU = 128_000  # the paper simulator's normalisers (milli-CPU, GPU-milli)
MAX_SPEC_GPU = 8_000


def bestfit_left(cpu_after: float, max_cpu: float, gpu_after: float, max_gpu: float) -> float:
    """The FGD paper simulator's BestFit measure (lower is better): CPU and GPU left on the
    node after the placement, each over the largest node's, weighted half and half. One
    definition for this replay policy and the fill protocol's ``bestfit``."""
    return 0.5 * cpu_after / max_cpu + 0.5 * gpu_after / max_gpu


def best_fit(snap: Snapshot) -> CycleResult:
    """The paper's BestFit: the feasible node with the least CPU and GPU left after."""
    max_cpu = max((n.cpu for n in snap.nodes), default=1.0) or 1.0
    max_cards = max((len(n.devices) for n in snap.nodes), default=1) or 1

    def left(p: ReplicaPlacement, state: ClusterState) -> tuple[float, str]:
        node = state.nodes[p.node]
        free = sum(1.0 - d.share_used for d in node.devices
                   if not (d.whole_used or d.mig_layout or d.external))
        taken = len(p.devices) if p.share <= 0 else p.share
        cpu_after = node.cpu_free - p.cpu
        return (bestfit_left(cpu_after, max_cpu, free - taken, max_cards), p.node)

    def choose(job: JobRequest, options: list[ReplicaPlacement], state: ClusterState):
        return min(options, key=lambda p: left(p, state))

    return fifo_policy(snap, typed=True, choose=choose)


class BestFitPolicy(SeededChoice):
    name = "bestfit"

    def choose(self, pod: FillPod, cl: FillCluster) -> Choice:
        best = -1
        tied: list[int] = []
        req = pod.total
        for (_model, free, cpu, _mem), idx in cl.feasible(pod):
            raw = bestfit_left(cpu - pod.cpu, MAX_SPEC_CPU, sum(free) - req, MAX_SPEC_GPU)
            score = int((1.0 - raw) * 100)
            if score > best:
                best, tied = score, list(idx)
            elif score == best:
                tied.extend(idx)
        if not tied:
            return None
        i = draw(self.rng, tied)
        node_free = cl.free[i]  # a shared pod takes the fullest card that fits
        return i, cards_for(pod, node_free,
                            lambda fits: min(fits, key=lambda g: (node_free[g], g)))
