"""Capacity of stopped jobs marked used on a snapshot's nodes (pure).

The rows themselves (``releasing_since``) are read and finalised in
:mod:`app.store.releasing_rows`; see its docstring for the whole story.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from app.scheduling.demands import held_kind
from app.scheduling.model import Node, ReplicaPlacement, Snapshot
from app.scheduling.state import copy_node


def hold_releasing(
    nodes: Sequence[Node],
    running: Iterable[Sequence[ReplicaPlacement]],
    releasing: Iterable[ReplicaPlacement],
) -> list[Node]:
    """``nodes`` with the releasing placements marked used (changed nodes are copies).

    Marked as plain usage on the node (``whole_used``, slices, shares, cpu,
    memory) rather than as a running job, so the core cannot preempt it or
    count it against a quota, and the empty cluster's static capacity (what
    could *ever* fit) is unchanged. A card a live allocation already holds
    (a preemptor admitted onto its victim's card, waiting to bind) is not
    marked again; cpu and memory are capped at the node's capacity for the
    same reason.
    """
    by_node: dict[str, list[ReplicaPlacement]] = defaultdict(list)
    for p in releasing:
        by_node[p.node].append(p)
    if not by_node:
        return list(nodes)
    live_whole: set[tuple[str, int]] = set()
    live_slices: set[tuple[str, int, int]] = set()
    live_share: dict[tuple[str, int], float] = defaultdict(float)
    live_cpu: dict[str, float] = defaultdict(float)
    live_mem: dict[str, float] = defaultdict(float)
    for placements in running:
        for p in placements:
            if p.node not in by_node:
                continue
            live_cpu[p.node] += p.cpu
            live_mem[p.node] += p.memory_gb
            if p.mig:
                live_slices.update((p.node, d, i) for d, i, _ in p.mig)
            elif p.share > 0:
                live_share[(p.node, p.devices[0])] += p.share
            else:
                live_whole.update((p.node, d) for d in p.devices)
    out: list[Node] = []
    for node in nodes:
        held = by_node.get(node.name)
        if not held:
            out.append(node)
            continue
        n = copy_node(node)
        for p in held:
            room_cpu = n.cpu - n.cpu_used - live_cpu[n.name]
            room_mem = n.memory_gb - n.memory_used_gb - live_mem[n.name]
            n.cpu_used += max(0.0, min(p.cpu, room_cpu))
            n.memory_used_gb += max(0.0, min(p.memory_gb, room_mem))
            for d in placement_devices(p):
                if d >= len(n.devices):
                    continue  # the node shrank; nothing left to hold
                dev = n.devices[d]
                if p.mig:
                    for dd, i, _ in p.mig:
                        free = (n.name, d, i) not in live_slices
                        if dd == d and i < len(dev.slices_used) and free:
                            dev.slices_used[i] = True
                elif p.share > 0:
                    room = 1.0 - dev.share_used - live_share[(n.name, d)]
                    dev.share_used += max(0.0, min(p.share, room))
                    dev.share_memory_gb += p.share_memory_gb
                elif (n.name, d) not in live_whole:
                    dev.whole_used = True
        out.append(n)
    return out


def hold_in_snapshot(snap: Snapshot, releasing: Iterable[ReplicaPlacement]) -> None:
    """Apply :func:`hold_releasing` to ``snap.nodes`` (the nodes list is replaced)."""
    snap.nodes = hold_releasing(snap.nodes, (j.placements for j in snap.running), releasing)


def placement_devices(p: ReplicaPlacement) -> list[int]:
    return held_kind(p).cards_of(p)
