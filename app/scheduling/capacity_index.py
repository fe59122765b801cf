"""Free capacity indexed by GPU type and size.

Why: a cycle may face 100,000 pending jobs on 10,000 nodes. Walking every
node for every job is what a naive first-fit does; instead each node is
filed under ``(gpu type, number of free whole cards)``, under the MIG
profiles it has free slices of, and under the shareable types it has a
partly used card of. A job that cannot fit anywhere is then rejected by
looking at a handful of buckets, and a job that can fit walks only the
nodes of the right bucket, most-allocated first for binpack.

The index is kept in step by :class:`~app.scheduling.state.ClusterState`
on every reserve/unreserve (``update(node)`` is O(devices)).

**Tentative changes leave no trace.** The buckets are insertion-ordered, and
of two equally good nodes placement takes the one it meets first. A node
re-filed after a gang trial or a what-if (reserve, then roll back) used to go
to the end of its bucket and group, so the next job met another order on the
very same capacity: two equal requests asked one after the other got
different placements, and an answer the cycle's memo kept for one was not
the answer the other would have got. Between :meth:`CapacityIndex.begin` and
:meth:`CapacityIndex.end` (the state opens one around every trial, what-if
and statement) the nodes touched are filed in an overlay and hidden from
their filing at the first ``begin``; at the outermost ``end`` a node whose
capacity is back where it was keeps its place in the base filing, and only
a node that really changed is moved. The cost is O(nodes touched).

A type grouped for the first time while a journal is open is grouped as if it had been
grouped before: the nodes the journal changed are filed in the base grouping under their
signature from before (kept by ``before_change``), hidden like every touched node. The
answers then do not depend on when a query first needed the type, and the grouping
outlives the journal (a reservation's search groups a full type once, not per what-if).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from app.scheduling.model import GpuType, Node
from app.scheduling.node_reads import node_signature

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


def full_capacity(n_devices: int) -> NodeCapacity:
    """What :func:`measure` gives for a node whose every card is wholly taken: one shared
    summary per card count (the index never changes a summary: a change measures anew),
    so 10,000 busy nodes do not make 10,000 equal ones every cycle."""
    cap = _FULL.get(n_devices)
    if cap is None:
        cap = _FULL[n_devices] = NodeCapacity()
        cap.n_devices = n_devices
        cap.used_frac = 1.0  # n x 1.0 / n
    return cap


_FULL: dict[int, NodeCapacity] = {}


def same_capacity(a: NodeCapacity, b: NodeCapacity) -> bool:
    """Equal summaries: a node filed by one is filed where the other would be."""
    return (a.free_whole == b.free_whole and a.used_frac == b.used_frac
            and a.mig_free == b.mig_free and a.share_free == b.share_free
            and a.n_devices == b.n_devices)


class _Files:
    """Nodes filed by free capacity: the index's base filing, or a journal's overlay."""

    __slots__ = ("whole", "mig", "share", "groups", "sig")

    def __init__(self) -> None:
        # type -> [bucket k] -> {node: None}; bucket k holds nodes with exactly k free cards
        self.whole: dict[str, list[dict[str, None]]] = {}
        # type -> profile -> {node: free slice count}
        self.mig: dict[str, dict[str, dict[str, int]]] = {}
        # type -> {node: most free share on a partly shared card}
        self.share: dict[str, dict[str, float]] = {}
        # type -> signature -> {node: None}: nodes no filter or score can tell apart
        # (:func:`~app.scheduling.node_reads.node_signature`)
        self.groups: dict[str | None, dict[tuple, dict[str, None]]] = {}
        self.sig: dict[str, tuple] = {}

    def file(self, name: str, t: str | None, cap: NodeCapacity) -> None:
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

    def unfile(self, name: str, t: str | None, cap: NodeCapacity) -> None:
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

    def group(self, name: str, t: str | None, sig: tuple) -> None:
        self.sig[name] = sig
        self.groups.setdefault(t, {}).setdefault(sig, {})[name] = None

    def ungroup(self, name: str, t: str | None) -> None:
        sig = self.sig.pop(name, None)
        by_sig = self.groups.get(t)
        if sig is None or by_sig is None:
            return
        names = by_sig.get(sig)
        if names is not None:
            names.pop(name, None)
            if not names:
                del by_sig[sig]


def _live(names: dict[str, None], hidden: dict, extra: dict[str, None] | None) -> Iterator[str]:
    """A base group's nodes the journal has not touched, then the ones it filed there."""
    for n in names:
        if n not in hidden:
            yield n
    if extra:
        yield from extra


class CapacityIndex:
    """Nodes filed by free capacity, per GPU type."""

    def __init__(self, gpu_types: Mapping[str, GpuType]) -> None:
        self.gpu_types = gpu_types
        self.caps: dict[str, NodeCapacity] = {}
        self.node_type: dict[str, str | None] = {}
        # schedulable nodes without GPUs (CPU-only work goes there first)
        self.cpu_nodes: dict[str, None] = {}
        # the filing; groups are built per type on first use (``groups_of``), then kept
        # in step
        self._base = _Files()
        self._nodes: dict[str, Node] = {}
        # each node's signature, computed once until the node changes (add / update):
        # grouping a type again after a what-if (see end()) then costs no signature of
        # the nodes it did not touch
        self._sigs: dict[str, tuple] = {}
        # the journal (see the module docstring): how many are open, each touched node's
        # summary and signature at the first begin(), the overlay where touched nodes are
        # filed meanwhile, what they left in the base buckets, and the types first grouped
        # while it was open
        self._depth = 0
        self._orig: dict[str, tuple[NodeCapacity, tuple | None]] = {}
        self._ov = _Files()
        self._hidden_whole: dict[tuple[str, int], int] = {}
        self._hidden_mig: dict[tuple[str, str], int] = {}
        self._fresh: set[str | None] = set()
        # the signature a node had before its first change in the journal, kept for a
        # node whose type was not grouped then (before_change): grouping the type later in
        # the journal files the node where it was, as if the type had been grouped before
        self._pre: dict[str, tuple] = {}

    # the base filing, which every query sees while no journal is open
    @property
    def whole(self) -> dict[str, list[dict[str, None]]]:
        return self._base.whole

    @property
    def mig(self) -> dict[str, dict[str, dict[str, int]]]:
        return self._base.mig

    @property
    def share(self) -> dict[str, dict[str, float]]:
        return self._base.share

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
        self._sigs.pop(node.name, None)
        self._base.file(node.name, t, cap)
        if t in self._base.groups:
            self._base.group(node.name, t, self._signature(node.name))

    def update(self, node: Node) -> None:
        """Re-file a node after its usage changed."""
        name = node.name
        old = self.caps.get(name)
        if old is None:
            return
        t = self.node_type[name]
        cap = measure(node, self.gpu_types.get(t) if t else None)
        self.caps[name] = cap
        self._nodes[name] = node
        self._sigs.pop(name, None)
        grouped = t in self._base.groups
        if self._depth:
            ov = self._ov
            if name in self._orig:
                ov.unfile(name, t, old)
                ov.ungroup(name, t)
            else:
                self._hide(name, t, old)
            ov.file(name, t, cap)
            if grouped:
                ov.group(name, t, self._signature(name))
            return
        base = self._base
        base.unfile(name, t, old)
        base.file(name, t, cap)
        if grouped:
            base.ungroup(name, t)
            base.group(name, t, self._signature(name))

    def _signature(self, name: str) -> tuple:
        """The node's :func:`~app.scheduling.node_reads.node_signature` as it is now."""
        sig = self._sigs.get(name)
        if sig is None:
            sig = self._sigs[name] = node_signature(self._nodes[name])
        return sig

    def before_change(self, name: str) -> None:
        """Called before a node's usage changes. Inside a journal, a node about to change
        for the first time whose type is not grouped yet keeps its signature as it is,
        so that grouping the type later in the journal can file it where it was
        (:meth:`_group_in_journal`)."""
        if (self._depth and name not in self._orig and name not in self._pre
                and name in self._nodes and self.node_type[name] not in self._base.groups):
            self._pre[name] = self._signature(name)

    def _hide(self, name: str, t: str | None, cap: NodeCapacity) -> None:
        """A node's first change inside the journal: its base filing stays where it is,
        hidden from the queries until the journal ends."""
        self._orig[name] = (cap, self._base.sig.get(name))
        if t is None:
            return
        if cap.free_whole:
            k = (t, cap.free_whole)
            self._hidden_whole[k] = self._hidden_whole.get(k, 0) + 1
        for prof, n in cap.mig_free.items():
            m = (t, prof)
            self._hidden_mig[m] = self._hidden_mig.get(m, 0) + n

    # -- the journal ---------------------------------------------------
    def begin(self) -> None:
        """Open a journal: changes until the matching :meth:`end` are tentative."""
        self._depth += 1

    def end(self) -> None:
        """Close a journal; the outermost files for good only the nodes that changed."""
        self._depth -= 1
        if self._depth:
            return
        if not self._orig:
            self._fresh = set()  # grouped meanwhile, nothing touched: the grouping stands
            return
        base = self._base
        for t in self._fresh:  # grouped meanwhile: grouped again on next use, as it is
            for members in base.groups.pop(t, {}).values():
                for n in members:
                    base.sig.pop(n, None)
        pre = self._pre
        for name, (cap0, sig0) in self._orig.items():
            t = self.node_type[name]
            cap = self.caps[name]
            grouped = t in base.groups
            sig = self._signature(name) if grouped else None
            if grouped and sig0 is None:  # its type was grouped after it changed
                sig0 = pre.get(name)
            if same_capacity(cap0, cap) and sig == sig0:
                continue  # back as it was: same bucket, same place in it
            base.unfile(name, t, cap0)
            base.file(name, t, cap)
            if grouped:
                assert sig is not None
                base.ungroup(name, t)
                base.group(name, t, sig)
        self._orig = {}
        self._ov = _Files()
        self._hidden_whole = {}
        self._hidden_mig = {}
        self._fresh = set()
        self._pre = {}

    # -- queries -------------------------------------------------------
    def groups_of(self, t: str | None) -> Iterable[tuple[tuple, Iterable[str]]]:
        """Nodes of type ``t`` (None: CPU-only nodes) grouped by their node signature,
        as (signature, node names) pairs.

        Scoring one node per group scores every distinct free-capacity state
        of the type: on a large cluster most nodes share a state, so this is
        far fewer than the nodes. Do not reserve while iterating.
        """
        base = self._base
        got = base.groups.get(t)
        if got is None:
            got = base.groups[t] = {}
            if self._depth:
                self._group_in_journal(t)
            else:
                node_type = self.node_type
                signature = self._signature
                for name in self._nodes:
                    if node_type[name] == t:
                        base.group(name, t, signature(name))
        if not self._orig:
            return got.items()
        return self._merged_groups(t, got)

    def _group_in_journal(self, t: str | None) -> None:
        """Group type ``t`` while a journal is open, as if it had been grouped before the
        journal: every node in the base filing, in node order, a node the journal changed
        under the signature it had before (hidden, as every touched node is, and filed in
        the overlay as it is now). The journal's view, its answers and what its end
        leaves are then those of a type grouped earlier: the index does not answer
        differently for when a type was first asked for, and a what-if that groups a
        type (a reservation's search, on a type whose every card was taken) leaves the
        grouping for the next instead of each grouping the type's nodes again.

        Should a touched node's earlier signature be unknown (changed without
        :meth:`before_change`), the type is grouped from the nodes untouched, the touched
        ones in the overlay, and grouped again after the journal, as it then is."""
        base, ov, orig, pre = self._base, self._ov, self._orig, self._pre
        node_type = self.node_type
        signature = self._signature
        names = [n for n in self._nodes if node_type[n] == t]
        if all(n in pre for n in names if n in orig):
            for name in names:
                if name in orig:
                    base.group(name, t, pre[name])
                    ov.group(name, t, signature(name))
                else:
                    base.group(name, t, signature(name))
            return
        self._fresh.add(t)
        for name in names:
            (ov if name in orig else base).group(name, t, signature(name))

    def _merged_groups(self, t: str | None, got: dict[tuple, dict[str, None]]
                       ) -> Iterator[tuple[tuple, Iterable[str]]]:
        orig = self._orig
        extra = self._ov.groups.get(t, {})
        for sig, names in got.items():
            yield sig, _live(names, orig, extra.get(sig))
        for sig, names in extra.items():
            if sig not in got:
                yield sig, names

    def group_types(self) -> list[str | None]:
        """Every type with schedulable nodes, CPU-only nodes (None) first."""
        types = set(self.node_type.values())
        return sorted(types, key=lambda t: (t is not None, t or ""))

    def _counts(self, t: str) -> list[int]:
        """Nodes per bucket (index k: nodes with exactly k free cards)."""
        buckets = self._base.whole.get(t) or []
        if not self._orig:
            return [len(b) for b in buckets]
        over = self._ov.whole.get(t) or []
        hidden = self._hidden_whole
        return [
            (len(buckets[k]) - hidden.get((t, k), 0) if k < len(buckets) else 0)
            + (len(over[k]) if k < len(over) else 0)
            for k in range(max(len(buckets), len(over)))
        ]

    def max_free_whole(self, t: str) -> int:
        if self._orig:
            counts = self._counts(t)
            for k in range(len(counts) - 1, 0, -1):
                if counts[k]:
                    return k
            return 0
        buckets = self._base.whole.get(t)
        if not buckets:
            return 0
        for k in range(len(buckets) - 1, 0, -1):
            if buckets[k]:
                return k
        return 0

    def free_whole_total(self, t: str) -> int:
        return sum(k * n for k, n in enumerate(self._counts(t)))

    def blocks_of(self, t: str, k: int) -> int:
        """How many k-card blocks fit across nodes (each node holds floor(free/k))."""
        if k <= 0:
            return 0
        return sum((b // k) * n for b, n in enumerate(self._counts(t)) if b >= k)

    def replica_slots(self, t: str, k: int, spread: bool = False) -> int:
        """Replicas of ``k`` whole cards of type ``t`` that fit now: k-card blocks,
        or with ``spread`` (one replica per node) the nodes with ``k`` free cards.
        The placement's quick rejection and the reasons count the same way."""
        if not spread:
            return self.blocks_of(t, k)
        return sum(n for b, n in enumerate(self._counts(t)) if b >= k)

    def nodes_with_whole(self, t: str, k: int, largest_first: bool = False) -> Iterator[str]:
        """Nodes of type ``t`` with at least ``k`` free cards, fullest first (or emptiest).

        Lazy and uncopied: do not reserve while iterating (collect first).
        """
        buckets = self._base.whole.get(t) or []
        orig = self._orig
        over = (self._ov.whole.get(t) or []) if orig else []
        top = max(len(buckets), len(over))
        if not top:
            return
        rng = range(top - 1, max(k, 1) - 1, -1) if largest_first else range(max(k, 1), top)
        for b in rng:
            if b < len(buckets):
                if orig:
                    yield from (n for n in buckets[b] if n not in orig)
                else:
                    yield from buckets[b]
            if b < len(over):
                yield from over[b]

    def mig_free_total(self, t: str, profile: str) -> int:
        n = sum(self._base.mig.get(t, {}).get(profile, {}).values())
        if self._orig:
            n += sum(self._ov.mig.get(t, {}).get(profile, {}).values())
            n -= self._hidden_mig.get((t, profile), 0)
        return n

    def nodes_with_mig(self, t: str, profile: str) -> Iterator[str]:
        orig = self._orig
        base = self._base.mig.get(t, {}).get(profile, {})
        if not orig:
            yield from base
            return
        yield from (n for n in base if n not in orig)
        yield from self._ov.mig.get(t, {}).get(profile, {})

    def _shares(self, t: str) -> Iterator[tuple[str, float]]:
        """(node, most free share on a partly shared card) of type ``t``."""
        orig = self._orig
        base = self._base.share.get(t, {})
        if not orig:
            yield from base.items()
            return
        yield from ((n, f) for n, f in base.items() if n not in orig)
        yield from self._ov.share.get(t, {}).items()

    def nodes_with_share(self, t: str, share: float) -> Iterator[str]:
        """Partly shared nodes first (keeps whole cards whole), then wholly free cards."""
        yield from [n for n, free in self._shares(t) if free + EPS >= share]
        yield from self.nodes_with_whole(t, 1)

    def has_share(self, t: str, share: float) -> bool:
        if self.max_free_whole(t) >= 1:
            return True
        return any(free + EPS >= share for _n, free in self._shares(t))
