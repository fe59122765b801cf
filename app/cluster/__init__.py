"""Cluster implementations behind :class:`app.cluster.interface.Cluster`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from app.clock import utcnow
from app.cluster.interface import Cluster
from app.cluster.kubernetes import KubernetesCluster
from app.cluster.simulated import SimulatedCluster
from app.domain.config import GpuTypeConfig
from app.domain.pod_policy import PodPolicy
from app.scheduling.model import Node
from app.settings import Settings


def build_cluster(
    settings: Settings,
    *,
    nodes: list[Node] | None = None,
    clock: Callable[[], datetime] | None = None,
    gpu_types: Sequence[GpuTypeConfig] = (),
    pod_policy_for: Callable[[str], PodPolicy | None] | None = None,
) -> Cluster:
    """The cluster ``GPUQ_CLUSTER`` names: ``simulated`` (default) or ``kubernetes``."""
    if settings.cluster == "simulated":
        return SimulatedCluster(
            nodes=list(nodes or []), clock=clock or utcnow, speed=settings.sim_speed
        )
    if settings.cluster == "kubernetes":
        # GPU types (with product patterns) to match the nodes' labels against
        # pod_policy_for: each team's Pod policy, re-checked at bind
        return KubernetesCluster.from_settings(
            settings, gpu_types=gpu_types, pod_policy_for=pod_policy_for
        )
    raise ValueError(f"unknown cluster {settings.cluster!r}")
