"""Free capacity indexed by GPU type and size.

Why: a cycle may face 100,000 pending jobs on 10,000 nodes. Walking every
node for every job is what a naive first-fit does; instead each node is
filed under ``(gpu type, number of free whole cards)``, under the MIG
profiles it has free slices of, and under the shareable types it has a
partly used card of. A job that cannot fit anywhere is then rejected by
looking at a handful of buckets, and a job that can fit walks only the
nodes of the right bucket, most-allocated first for binpack.

The index is kept in step by :class:`~gpuq.scheduling.state.ClusterState`
on every reserve/unreserve (``update(node)`` is O(devices)).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from gpuq.scheduling.model import GpuType, Node
from gpuq.scheduling.node_reads import node_signature

EPS = 1e-9


class NodeCapacity:
    """What the index remembers about one node (a small, flat record)."""

    __slots__ = ("free_whole", "used_frac", "mig_free", "share_free", "n_devices")

    def __init__(self) -> None:
        self.free_whole = 0
        self.used_frac = 0.0
        self.mig_free: dict[str, int] = {}
        self.share_free = 0.0  # most free share on a partly shared card
        self.n_devices = 0


def measure(node: Node, gpu_type: GpuType | None) -> NodeCapacity:
    """Summarise a node's free devices, slices and shares."""
    cap = NodeCapacity()
    devices = node.devices
    cap.n_devices = len(devices)
    if not devices:
        return cap
    used = 0.0
    profiles = gpu_type.mig_profiles if gpu_type is not None else {}
    shareable = gpu_type is not None and gpu_type.shareable
    for d in devices:
        if d.external:
            used += 1.0
            continue
        if d.mig_layout:
            for i, prof in enumerate(d.mig_layout):
                if d.slices_used[i]:
                    p = profiles.get(prof)
                    used += p.compute_fraction if p is not None else 1.0 / len(d.mig_layout)
                else:
                    cap.mig_free[prof] = cap.mig_free.get(prof, 0) + 1
            continue
        if d.whole_used:
            used += 1.0
            continue
        if d.share_used > EPS:
            used += d.share_used
            if shareable:
                free = 1.0 - d.share_used
                if free > cap.share_free:
                    cap.share_free = free
            continue
        cap.free_whole += 1
    cap.used_frac = used / len(devices)
    return cap


class CapacityIndex:
    """Nodes filed by free capacity, per GPU type."""

    def __init__(self, gpu_types: Mapping[str, GpuType]) -> None:
        self.gpu_types = gpu_types
        self.caps: dict[str, NodeCapacity] = {}
        self.node_type: dict[str, str | None] = {}
        # type -> [bucket k] -> {node: None}; bucket k holds nodes with exactly k free cards
        self.whole: dict[str, list[dict[str, None]]] = {}
        # type -> profile -> {node: free slice count}
        self.mig: dict[str, dict[str, dict[str, int]]] = {}
        # type -> {node: most free share on a partly shared card}
        self.share: dict[str, dict[str, float]] = {}
        # schedulable nodes without GPUs (CPU-only work goes there first)
        self.cpu_nodes: dict[str, None] = {}
        # type -> signature -> {node: None}: nodes no filter or score can tell apart
        # (:func:`~gpuq.scheduling.node_reads.node_signature`). Built per type on first
        # use (``groups_of``), then kept in step.
        self._groups: dict[str | None, dict[tuple, dict[str, None]]] = {}
        self._sig: dict[str, tuple] = {}
        self._nodes: dict[str, Node] = {}

    # -- maintenance ---------------------------------------------------
    def add(self, node: Node, cap: NodeCapacity | None = None) -> None:
        """File a node; ``cap`` is its summary when already known (never mutated)."""
        if not node.schedulable:
            return
        t = node.gpu_type if node.devices else None
        self.node_type[node.name] = t
        if t is None:
            self.cpu_nodes[node.name] = None
        if cap is None:
            cap = measure(node, self.gpu_types.get(t) if t else None)
        self.caps[node.name] = cap
        self._nodes[node.name] = node
        self._file(node.name, t, cap)
        if t in self._groups:
            self._group(node, t)

    def update(self, node: Node) -> None:
        """Re-file a node after its usage changed."""
        old = self.caps.get(node.name)
        if old is None:
            return
        t = self.node_type[node.name]
        self._unfile(node.name, t, old)
        cap = measure(node, self.gpu_types.get(t) if t else None)
        self.caps[node.name] = cap
        self._nodes[node.name] = node
        self._file(node.name, t, cap)
        if t in self._groups:
            self._ungroup(node.name, t)
            self._group(node, t)

    def _group(self, node: Node, t: str | None) -> None:
        sig = node_signature(node)
        self._sig[node.name] = sig
        self._groups[t].setdefault(sig, {})[node.name] = None

    def _ungroup(self, name: str, t: str | None) -> None:
        sig = self._sig.pop(name, None)
        by_sig = self._groups.get(t)
        if sig is None or by_sig is None:
            return
        names = by_sig.get(sig)
        if names is not None:
            names.pop(name, None)
            if not names:
                del by_sig[sig]

    def _file(self, name: str, t: str | None, cap: NodeCapacity) -> None:
        if t is None:
            return
        if cap.free_whole:
            buckets = self.whole.setdefault(t, [])
            while len(buckets) <= cap.free_whole:
                buckets.append({})
            buckets[cap.free_whole][name] = None
        if cap.mig_free:
            by_prof = self.mig.setdefault(t, {})
            for prof, n in cap.mig_free.items():
                by_prof.setdefault(prof, {})[name] = n
        if cap.share_free > EPS:
            self.share.setdefault(t, {})[name] = cap.share_free

    def _unfile(self, name: str, t: str | None, cap: NodeCapacity) -> None:
        if t is None:
            return
        if cap.free_whole:
            self.whole[t][cap.free_whole].pop(name, None)
        if cap.mig_free:
            by_prof = self.mig[t]
            for prof in cap.mig_free:
                by_prof[prof].pop(name, None)
        if cap.share_free > EPS:
            self.share[t].pop(name, None)

    # -- queries -------------------------------------------------------
    def groups_of(self, t: str | None) -> dict[tuple, dict[str, None]]:
        """Nodes of type ``t`` (None: CPU-only nodes) grouped by their node signature.

        Scoring one node per group scores every distinct free-capacity state
        of the type: on a large cluster most nodes share a state, so this is
        far fewer than the nodes. Do not reserve while iterating.
        """
        got = self._groups.get(t)
        if got is None:
            got = self._groups[t] = {}
            node_type = self.node_type
            for name, node in self._nodes.items():
                if node_type[name] == t:
                    self._group(node, t)
        return got

    def group_types(self) -> list[str | None]:
        """Every type with schedulable nodes, CPU-only nodes (None) first."""
        types = set(self.node_type.values())
        return sorted(types, key=lambda t: (t is not None, t or ""))

    def max_free_whole(self, t: str) -> int:
        buckets = self.whole.get(t)
        if not buckets:
            return 0
        for k in range(len(buckets) - 1, 0, -1):
            if buckets[k]:
                return k
        return 0

    def free_whole_total(self, t: str) -> int:
        buckets = self.whole.get(t) or []
        return sum(k * len(b) for k, b in enumerate(buckets))

    def blocks_of(self, t: str, k: int) -> int:
        """How many k-card blocks fit across nodes (each node holds floor(free/k))."""
        if k <= 0:
            return 0
        buckets = self.whole.get(t) or []
        return sum((b // k) * len(nodes) for b, nodes in enumerate(buckets) if b >= k)

    def replica_slots(self, t: str, k: int, spread: bool = False) -> int:
        """Replicas of ``k`` whole cards of type ``t`` that fit now: k-card blocks,
        or with ``spread`` (one replica per node) the nodes with ``k`` free cards.
        The placement's quick rejection and the reasons count the same way."""
        if not spread:
            return self.blocks_of(t, k)
        buckets = self.whole.get(t) or []
        return sum(len(nodes) for b, nodes in enumerate(buckets) if b >= k)

    def nodes_with_whole(self, t: str, k: int, largest_first: bool = False) -> Iterator[str]:
        """Nodes of type ``t`` with at least ``k`` free cards, fullest first (or emptiest).

        Lazy and uncopied: do not reserve while iterating (collect first).
        """
        buckets = self.whole.get(t)
        if not buckets:
            return
        rng = range(len(buckets) - 1, max(k, 1) - 1, -1) if largest_first else range(
            max(k, 1), len(buckets)
        )
        for b in rng:
            yield from buckets[b]

    def mig_free_total(self, t: str, profile: str) -> int:
        return sum(self.mig.get(t, {}).get(profile, {}).values())

    def nodes_with_mig(self, t: str, profile: str) -> Iterator[str]:
        yield from self.mig.get(t, {}).get(profile, {})

    def nodes_with_share(self, t: str, share: float) -> Iterator[str]:
        """Partly shared nodes first (keeps whole cards whole), then wholly free cards."""
        partial = self.share.get(t, {})
        yield from [n for n, free in partial.items() if free + EPS >= share]
        yield from self.nodes_with_whole(t, 1)

    def has_share(self, t: str, share: float) -> bool:
        if self.max_free_whole(t) >= 1:
            return True
        return any(free + EPS >= share for free in self.share.get(t, {}).values())
