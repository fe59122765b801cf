"""The dispatcher's side of releasing capacity: what the cluster shows, and
holding the releasing rows on the incremental picture's snapshot.

The rows and their SQL are in :mod:`app.store.releasing_rows`; marking them on
nodes is pure (:mod:`app.scheduling.releasing`).
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.cluster.interface import Cluster
from app.scheduling.releasing import hold_in_snapshot
from app.store.releasing_rows import ClusterView, releasing_placements
from app.store.snapshot import SnapshotContext


def cluster_view(cluster: Cluster) -> ClusterView:
    """What the cluster shows, read once per pass."""
    return ClusterView(
        running=set(cluster.running_job_ids()),
        draining=set(cluster.draining_job_ids()),
        live=set(cluster.live_job_ids()),
    )


def hold_releasing_in_context(session: Session, ctx: SnapshotContext) -> None:
    """For a snapshot not made by build_snapshot (the dispatcher's incremental
    picture): read the releasing rows and mark them used."""
    ctx.releasing = [p for _job, p in releasing_placements(session)]
    hold_in_snapshot(ctx.snapshot, ctx.releasing)
