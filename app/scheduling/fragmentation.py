"""How much a placement reduces what the expected job mix can still use.

The idea of Fragmentation Gradient Descent (FGD, USENIX ATC'23): a node's
fragmentation, with respect to a workload, is the GPU capacity on it that
a task drawn from that workload could not use. Placing a task where that
measure grows least keeps the cluster able to take future tasks.

INTERFACE NOTE (for the team): the signatures below are fixed; the body of
``node_fragmentation`` is owned by the evaluation work (branch ``fill``) and
is a placeholder until then.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.scheduling.model import GpuType, Node, ReplicaPlacement


@dataclass(frozen=True, slots=True)
class MixEntry:
    """One kind of task in the expected workload.

    ``gpus`` whole cards, or (when ``gpus == 0``) ``gpu_share`` of one card
    (0 < share <= 1; 0 means CPU-only). ``weight`` is its popularity.
    """

    gpus: int
    gpu_share: float
    cpu: float
    memory_gb: float
    gpu_types: tuple[str, ...] = ()
    min_gpu_memory_gb: float = 0.0
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class WorkloadMix:
    entries: tuple[MixEntry, ...] = ()


def node_fragmentation(node: Node, gpu_type: GpuType | None, mix: WorkloadMix) -> float:
    """Expected unusable GPU capacity (in cards) on ``node`` for a task drawn from ``mix``."""
    return 0.0


def fragmentation_delta(
    node: Node, gpu_type: GpuType | None, placement: ReplicaPlacement, mix: WorkloadMix
) -> float:
    """Fragmentation after minus before placing ``placement`` on ``node`` (lower is better).

    ``node`` is not changed.
    """
    return 0.0
