"""A mutable working copy of the cluster for one cycle.

The core never mutates the caller's snapshot: it copies the nodes,
applies what is running, and then reserves/unreserves placements on the
copy (``reserve`` returns nothing to undo by hand: call ``unreserve``
with the same placement, the kube-scheduler rule).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace

from app.scheduling.model import Device, Node, ReplicaPlacement, RunningJob, Snapshot

EPS = 1e-9


def copy_node(node: Node) -> Node:
    return replace(
        node,
        devices=[replace(d, slices_used=list(d.slices_used)) for d in node.devices],
    )


class ClusterState:
    """Nodes by name with usage applied."""

    def __init__(self, nodes: Iterable[Node]) -> None:
        self.nodes: dict[str, Node] = {n.name: copy_node(n) for n in nodes}

    @classmethod
    def from_snapshot(cls, snap: Snapshot) -> ClusterState:
        state = cls(snap.nodes)
        for job in snap.running:
            for p in job.placements:
                if p.node in state.nodes:
                    state.reserve(p)
        return state

    def reserve(self, p: ReplicaPlacement) -> None:
        node = self.nodes[p.node]
        node.cpu_used += p.cpu
        node.memory_used_gb += p.memory_gb
        if p.mig:
            for dev, idx, _profile in p.mig:
                node.devices[dev].slices_used[idx] = True
        elif p.share > 0:
            d = node.devices[p.devices[0]]
            d.share_used += p.share
            d.share_memory_gb += p.share_memory_gb
        else:
            for dev in p.devices:
                node.devices[dev].whole_used = True

    def unreserve(self, p: ReplicaPlacement) -> None:
        node = self.nodes[p.node]
        node.cpu_used -= p.cpu
        node.memory_used_gb -= p.memory_gb
        if p.mig:
            for dev, idx, _profile in p.mig:
                node.devices[dev].slices_used[idx] = False
        elif p.share > 0:
            d = node.devices[p.devices[0]]
            d.share_used = max(0.0, d.share_used - p.share)
            d.share_memory_gb = max(0.0, d.share_memory_gb - p.share_memory_gb)
        else:
            for dev in p.devices:
                node.devices[dev].whole_used = False

    @contextmanager
    def simulate_remove(self, jobs: Iterable[RunningJob]) -> Iterator[None]:
        """What-if: free the jobs' capacity, restore it on exit."""
        placed = [p for j in jobs for p in j.placements if p.node in self.nodes]
        for p in placed:
            self.unreserve(p)
        try:
            yield
        finally:
            for p in placed:
                self.reserve(p)


def device_overcommitted(d: Device) -> bool:
    """True when a card is handed out more than once (used by tests and checks)."""
    holders = int(d.whole_used) + int(d.share_used > EPS) + int(any(d.slices_used))
    return holders > 1 or d.share_used > 1 + EPS
