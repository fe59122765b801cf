"""Cluster implementations behind :class:`app.cluster.base.Cluster`."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.cluster.base import Cluster
    from app.scheduling.model import Node
    from app.settings import Settings


def build_cluster(
    settings: Settings,
    *,
    nodes: list[Node] | None = None,
    clock: Callable[[], datetime] | None = None,
) -> Cluster:
    """The cluster ``GPUQ_CLUSTER`` names: ``simulated`` (default) or ``kubernetes``."""
    if settings.cluster == "simulated":
        from app.clock import utcnow
        from app.cluster.simulated import SimulatedCluster

        return SimulatedCluster(
            nodes=list(nodes or []), clock=clock or utcnow, speed=settings.sim_speed
        )
    if settings.cluster == "kubernetes":
        from app.cluster.kubernetes import KubernetesCluster  # type: ignore[import-not-found]

        return KubernetesCluster.from_settings(settings)
    raise ValueError(f"unknown cluster {settings.cluster!r}")
