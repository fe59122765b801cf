"""A mutable working copy of the cluster for one cycle.

The core never mutates the caller's snapshot. Nodes are copied lazily
(copy-on-write: a node is copied the first time something is reserved or
released on it), because copying 10,000 nodes x 8 devices every cycle
costs more than the rest of a cycle. ``reserve`` returns nothing to undo
by hand: call ``unreserve`` with the same placement (the kube-scheduler
rule). Every change also re-files the node in the capacity index, so
the index is always in step with ``nodes``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

from app.scheduling.capacity_index import CapacityIndex, full_capacity
from app.scheduling.demands import held_kind
from app.scheduling.model import (
    Device,
    GpuType,
    Node,
    ReplicaPlacement,
    RunningJob,
    Snapshot,
)

EPS = 1e-9


def copy_device(d: Device) -> Device:
    return Device(
        d.index, d.mig_layout, d.whole_used, list(d.slices_used), d.share_used,
        d.share_memory_gb, d.external,
    )


def copy_node(node: Node) -> Node:
    return _with_devices(node, [copy_device(d) for d in node.devices])


def _with_devices(node: Node, devices: list[Device]) -> Node:
    """A copy of ``node`` (what :func:`copy_node` copies) holding ``devices``."""
    return Node(
        node.name, node.gpu_type, devices, node.cpu,
        node.memory_gb, node.cpu_used, node.memory_used_gb, node.rack, node.network,
        node.nvlink_domain, node.labels, node.taints, node.schedulable,
    )


class ClusterState:
    """Nodes by name with usage applied, plus a capacity index kept in step.

    ``nodes[name]`` may be the caller's object until the first change on
    that node; treat it as read-only and change it only via
    ``apply``/``unapply`` (one placement) or ``reserve``/``release`` (a job).
    """

    def __init__(
        self, nodes: Iterable[Node], gpu_types: Mapping[str, GpuType] | None = None
    ) -> None:
        self.nodes: dict[str, Node] = {n.name: n for n in nodes}
        self._owned: set[str] = set()
        # owned nodes whose device list still holds objects the state does not own (the
        # caller's cards, or the shared taken card below): copied before a device changes
        self._borrowed: set[str] = set()
        # borrowed nodes: how many of their cards are the shared taken card (all of them:
        # the node's capacity summary is known without reading its cards)
        self._taken_slots: dict[str, int] = {}
        self._taken: dict[int, Device] = {}  # index -> the one taken whole card, never changed
        self.gpu_types: Mapping[str, GpuType] = gpu_types or {}
        self._index: CapacityIndex | None = None
        self._idle_caps: dict | None = None  # name -> NodeCapacity of the untouched node
        # bumped whenever capacity is released for good (not a rollback), so
        # "this shape does not fit" memos of a cycle know when to forget.
        self.release_epoch = 0

    @classmethod
    def from_snapshot(cls, snap: Snapshot) -> ClusterState:
        state = cls(snap.nodes, snap.gpu_types)
        nodes = state.nodes
        take = state._take_whole
        for job in snap.running:
            for p in job.placements:
                if p.node in nodes:
                    if p.mig or p.share > 0:
                        state._apply(p, +1)
                    else:
                        take(p)
        state.release_epoch = 0
        cache = snap.static_cache
        if cache is not None:
            # summaries of the idle nodes, reused from earlier cycles (see Snapshot)
            if cache.get("nodes") is not snap.nodes:
                cache.clear()
                cache["nodes"] = snap.nodes
                cache["idle_caps"] = {}
            state._idle_caps = cache["idle_caps"]
        return state

    # -- index -----------------------------------------------------------
    @property
    def index(self) -> CapacityIndex:
        if self._index is None:
            idx = CapacityIndex(self.gpu_types)
            idle = self._idle_caps
            owned = self._owned
            full = self._taken_slots
            for name, n in self.nodes.items():
                if idle is None or name in owned:
                    if n.devices and full.get(name) == len(n.devices):
                        idx.add(n, full_capacity(len(n.devices)))  # every card taken
                    else:
                        idx.add(n)
                else:  # untouched this cycle: its summary is the idle one
                    cap = idle.get(name)
                    idx.add(n, cap)
                    if cap is None:
                        idle[name] = idx.caps.get(name)
            self._index = idx
        return self._index

    def index_for(self, gpu_types: Mapping[str, GpuType]) -> CapacityIndex:
        """The index, rebuilt if the state was made without the GPU types."""
        if not self.gpu_types and gpu_types:
            self.gpu_types = gpu_types
            self._index = None
        return self.index

    # -- changes -----------------------------------------------------------
    def _own(self, name: str) -> Node:
        node = self.nodes[name]
        if name not in self._owned:
            node = copy_node(node)
            self.nodes[name] = node
            self._owned.add(name)
        elif name in self._borrowed:
            node.devices = [copy_device(d) for d in node.devices]
            self._borrowed.discard(name)
            self._taken_slots.pop(name, None)
        return node

    def _take_whole(self, p: ReplicaPlacement) -> None:
        """:meth:`_apply` (+1) of a running job's whole cards, without copying the cards.

        Building the state applies every running placement: at 10,000 busy nodes,
        copying 80,000 cards was most of the build. A free card a placement takes
        becomes the state's one shared taken card of that index (equal to what the copy
        would have become), and the node's own copy of its cards is made only if the
        cycle changes one of them (:meth:`_own`)."""
        name = p.node
        node = self.nodes[name]
        devices = node.devices
        n = len(devices)
        if p.mig or (p.gpu_type is not None and p.gpu_type != node.gpu_type):
            fits = held_fits(node, p)
        else:  # held_fits, inlined for whole cards (10,000 busy nodes go through here)
            fits = True
            for dev in p.devices:
                if not 0 <= dev < n or devices[dev].mig_layout:
                    fits = False
                    break
        if not fits:
            self._strand(name)  # never applied, so nothing to take back either
            return
        if self._index is not None:
            self._index.before_change(name)
        if name not in self._owned:
            node = _with_devices(node, list(node.devices))
            self.nodes[name] = node
            self._owned.add(name)
            self._borrowed.add(name)
        elif name not in self._borrowed:
            self._apply(p, +1)  # the node's cards are its own already
            return
        devices = node.devices
        taken = self._taken
        replaced = 0
        for i in p.devices:
            d = devices[i]
            if taken.get(d.index) is d:
                continue  # taken twice (the caller's double booking): as _apply, no change
            if (d.whole_used or d.mig_layout or d.slices_used or d.external
                    or d.share_used != 0.0 or d.share_memory_gb != 0.0):
                # not a whole card nothing holds (taking one of those makes exactly
                # ``Device(index, whole_used=True)``): it changes on a copy of its own
                devices = node.devices = [copy_device(x) for x in devices]
                self._borrowed.discard(name)
                self._taken_slots.pop(name, None)
                for k in p.devices:
                    devices[k].whole_used = True
                break
            t = taken.get(d.index)
            if t is None:
                t = taken[d.index] = Device(d.index, whole_used=True)
            devices[i] = t
            replaced += 1
        else:
            if replaced:
                self._taken_slots[name] = self._taken_slots.get(name, 0) + replaced
        node.cpu_used += p.cpu
        node.memory_used_gb += p.memory_gb
        if self._index is not None:
            self._index.update(node)

    def _strand(self, name: str) -> None:
        """A running placement names cards the node no longer has (its cards, MIG
        layout or type changed under it): nothing new goes on the node until the
        job is gone, and the cycle goes on (it used to fail with an IndexError)."""
        if self._index is not None:
            self._index.before_change(name)
        node = self._own(name)
        node.schedulable = False
        if self._index is not None:
            self._index.update(node)

    def apply(self, p: ReplicaPlacement) -> None:
        """Take what one placement holds (a placement being decided, or a job's)."""
        self._apply(p, +1)

    def unapply(self, p: ReplicaPlacement) -> None:
        """Give back what one placement holds (a release: memos of the cycle forget)."""
        self._apply(p, -1)
        self.release_epoch += 1

    # -- the Book protocol (app/scheduling/books.py) -------------------------
    def reserve(self, r: RunningJob) -> None:
        """A job's placements held on their nodes (a node that left is skipped)."""
        nodes = self.nodes
        for p in r.placements:
            if p.node in nodes:
                self._apply(p, +1)

    def release(self, r: RunningJob) -> None:
        nodes = self.nodes
        for p in r.placements:
            if p.node in nodes:
                self._apply(p, -1)
                self.release_epoch += 1

    def _apply(self, p: ReplicaPlacement, sign: int) -> None:
        if not held_fits(self.nodes[p.node], p):
            self._strand(p.node)  # never applied, so nothing to take back either
            return
        if self._index is not None:
            self._index.before_change(p.node)
        node = self._own(p.node)
        node.cpu_used += sign * p.cpu
        node.memory_used_gb += sign * p.memory_gb
        held_kind(p).hold(node, p, sign > 0)
        if self._index is not None:
            self._index.update(node)

    # -- tentative changes ---------------------------------------------------
    def begin(self) -> CapacityIndex | None:
        """Open a journal on the capacity index: changes until :meth:`end` are
        tentative, and undoing them leaves the index exactly as it was, the order of
        its buckets included (:mod:`app.scheduling.capacity_index`). Returns the
        token to give :meth:`end`."""
        idx = self._index
        if idx is not None:
            idx.begin()
        return idx

    def end(self, token: CapacityIndex | None) -> None:
        if token is not None:
            if token is self._index:
                token.end()
        elif self._index is not None:
            # built while the changes were made: built again from the state as it is
            # now, as if they had never happened
            self._index = None

    @contextmanager
    def simulate_remove(self, jobs: Iterable[RunningJob]) -> Iterator[None]:
        """What-if: free the jobs' capacity, restore it on exit."""
        placed = [p for j in jobs for p in j.placements if p.node in self.nodes]
        epoch = self.release_epoch
        token = self.begin()
        for p in placed:
            self.unapply(p)
        try:
            yield
        finally:
            for p in placed:
                self.apply(p)
            self.release_epoch = epoch
            self.end(token)

    @contextmanager
    def trial(self) -> Iterator[list[ReplicaPlacement]]:
        """Reserve placements tentatively; everything appended is rolled back on exit.

        Used for gangs (try on the working copy, then commit or roll back).
        A rollback is not a release, so memos stay valid; nor does it reorder the
        capacity index (the next job meets the nodes in the same order).
        """
        placed: list[ReplicaPlacement] = []
        epoch = self.release_epoch
        token = self.begin()
        try:
            yield placed
        finally:
            for p in reversed(placed):
                self._apply(p, -1)
            self.release_epoch = epoch
            self.end(token)


def held_fits(node: Node, p: ReplicaPlacement) -> bool:
    """True when the node still has the cards (and slices) placement ``p`` holds."""
    if p.gpu_type is not None and p.gpu_type != node.gpu_type:
        return False
    return held_kind(p).held_on(node, p)


def device_overcommitted(d: Device) -> bool:
    """True when a card is handed out more than once (used by tests and checks)."""
    holders = int(d.whole_used) + int(d.share_used > EPS) + int(any(d.slices_used))
    return holders > 1 or d.share_used > 1 + EPS
