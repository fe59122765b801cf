"""Placement of one job: filter, then score, gangs all or nothing.

Public API (stable; the fill protocol and the engine call it):

``place_job(job, state, ctx) -> list[ReplicaPlacement] | None``
    Where the job would go, or None if it cannot be placed now. The state
    is left exactly as it was: reserving on success is the CALLER's
    choice (``for p in placements: state.apply(p)``). Nothing is rebuilt
    per call: the state's capacity index is reused, so thousands of jobs
    can be placed one at a time on one persistent ClusterState.

How: the request mode becomes per-replica :class:`Demand` options
(demands.py); candidate nodes come from the capacity index in binpack
(fullest first) or spread (emptiest first) order; each feasible node is
scored (scores.py) and the best taken. A gang reserves replica by
replica inside ``state.trial()`` and is rolled back unless at least
``min_available`` replicas fit. Topology: ``same_node`` pins the gang to
one node, ``same_rack`` to one rack, ``fast_network`` keeps a multi-node
gang on ib/roce nodes. A multi-replica job never mixes GPU types unless
``allow_mixed_types``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from app.scheduling.capacity_index import CapacityIndex
from app.scheduling.context import Hold, PlacementContext
from app.scheduling.demands import Demand, UnitCombo, unit_combos
from app.scheduling.filters import (
    FAST_NETWORKS,
    allowed_types,
    node_fits_host,
    selects,
    tolerates,
)
from app.scheduling.job_reads import job_view, reads_job, view
from app.scheduling.model import GpuType, JobRequest, Node, ReplicaPlacement
from app.scheduling.modes import MODE_FIELDS, mode_of
from app.scheduling.node_reads import node_signature, reads
from app.scheduling.scores import memory_waste, score, speed_gain
from app.scheduling.state import ClusterState

__all__ = ["PlacementContext", "place_job", "try_place", "Placed"]

EPS = 1e-9
Restrict = Callable[[Node], bool] | None
# A scored candidate: (score, node name, the replica's placement there, or None when only its
# state's cached answers were read -- made for the winner alone: :func:`_made`)
Candidate = tuple[float, str, ReplicaPlacement | None]
Choice = tuple[float, str, ReplicaPlacement | None, Demand]  # a candidate and its demand


@dataclass(slots=True)
class Placed:
    placements: list[ReplicaPlacement]
    score: float


def place_job(
    job: JobRequest, state: ClusterState, ctx: PlacementContext
) -> list[ReplicaPlacement] | None:
    """Where ``job`` goes (state unchanged; the caller reserves), or None."""
    res = try_place(job, state, ctx)
    return res.placements if res is not None else None


# What the allowed types (filters.allowed_types) and a mode's options read of a request
OPTION_READS = view(MODE_FIELDS | {"pool", "gpu_types", "avoid_gpu_types", "min_gpu_memory_gb"})


def try_place(job: JobRequest, state: ClusterState, ctx: PlacementContext) -> Placed | None:
    index = state.index_for(ctx.gpu_types)
    cache = ctx.options_cache  # a backlog has few request shapes
    owner = cache.get(None)
    if owner is None or owner[0] is not ctx.gpu_types or owner[1] is not ctx.pools:
        cache.clear()  # made for other types or pools (a context copied with replace())
        cache[None] = (ctx.gpu_types, ctx.pools)
    key = OPTION_READS(job)
    shape = cache.get(key)
    if shape is None:
        types = allowed_types(job, ctx.gpu_types, ctx.pools)
        mode = mode_of(job)
        units = mode.units_total(job)
        shape = cache[key] = (types, mode, units,
                              mode.options(job, types) if units is None else [])
    types, mode, units, demands = shape
    if units is not None:  # one CU total of whole cards, not replica by replica
        return _place_units(job, units, state, index, ctx, types)
    if not demands:
        return None
    if job.replicas > 1 and not job.allow_mixed_types and demands[0].how.on_card:
        by_type: dict[str | None, list[Demand]] = {}
        for d in demands:
            by_type.setdefault(d.gpu_type, []).append(d)
        groups = list(by_type.values())
    else:
        groups = [demands]
    if mode.cheapest_first:
        return _best_of(groups, job, state, index, ctx, cheapest_first=True)
    tiers = speed_tiers(job, demands, ctx)
    for tier in tiers:  # the first speed tier where the job fits decides its type
        got = _best_of([g for g in ([d for d in grp if d.gpu_type in tier] for grp in groups)
                        if g], job, state, index, ctx)
        if got is not None or len(tiers) == 1:
            return got
    if len(groups) == 1 and job.replicas > 1:  # a gang that may mix types: every tier at once
        return _best_of(groups, job, state, index, ctx)
    return None


def _best_of(groups: list[list[Demand]], job: JobRequest, state: ClusterState,
             index: CapacityIndex, ctx: PlacementContext,
             cheapest_first: bool = False) -> Placed | None:
    best: Placed | None = None
    for group in groups:
        if not _could_fit(job, group, index):
            continue
        res = _place_topology(job, group, state, index, ctx)
        if res is not None and (best is None or res.score > best.score):
            best = res
            if cheapest_first:
                break  # cheapest group in CU wins (groups are in price order)
    return best


def speed_tiers(job: JobRequest, demands: list[Demand],
                ctx: PlacementContext) -> list[set[str | None]]:
    """The job's GPU types in the order they are tried: the fastest for the job first
    (its own speed table, else the operator's ``GpuType.speed``), types of equal speed
    together; within a tier the score decides (memory fit, binpack, fragmentation, type
    pressure, pool order). One tier when the types all run at the same speed.

    A job goes to its fastest allowed type that has room -- as a competent operator sets
    up Kueue (flavors fastest first), Volcano (preferred affinity) or Slurm (node
    ``Weight``). Keeping fast cards free for work that can run only there, by a price in
    the score (the ``w_speed`` weight against type pressure and fragmentation) or by
    holding a type while such work waits, cost more run time than it saved in waits on
    the tuning windows (docs/evaluation.md); a job that needs a whole node gets it by
    the descheduler's moves and, after ``reservation_after_s``, by a reservation.
    """
    types = {d.gpu_type for d in demands}
    if len(types) < 2 or None in types or not (job.speed or ctx.typed_speeds):
        return [types]
    by_speed: dict[float, set[str | None]] = {}
    for t in types:
        assert t is not None
        by_speed.setdefault(round(speed_gain(job, t, ctx.gpu_types), 9), set()).add(t)
    return [by_speed[k] for k in sorted(by_speed, reverse=True)]


# -- quick rejection -----------------------------------------------------------
def _could_fit(job: JobRequest, demands: list[Demand], index: CapacityIndex) -> bool:
    """Index-only necessary condition: O(buckets), no node scan."""
    need = job.min_available
    total = 0
    for d in demands:
        total += d.how.slots(d, index, job, need)
        if total >= need:
            return True
    return total >= need


# -- topology ------------------------------------------------------------------
def _place_topology(
    job: JobRequest, demands: list[Demand], state: ClusterState, index: CapacityIndex,
    ctx: PlacementContext,
) -> Placed | None:
    multi = job.min_available > 1 or job.replicas > 1
    topo = job.topology if multi else "none"
    if topo == "none":
        return _place_gang(job, demands, state, index, ctx, None)
    if topo in ("same_node", "fast_network"):
        # one node for the whole gang; fast_network may then go multi-node on ib/roce
        for name in _first_replica_nodes(job, demands, state, index, ctx):
            res = _place_gang(job, demands, state, index, ctx, _only_node(name))
            if res is not None:
                return res
        if topo == "same_node":
            return None
        return _place_gang(job, demands, state, index, ctx, _fast_only)
    if topo == "same_rack":
        seen: set[str] = set()
        for name in _first_replica_nodes(job, demands, state, index, ctx):
            rack = state.nodes[name].rack
            key = rack if rack is not None else f"node:{name}"
            if key in seen:
                continue
            seen.add(key)
            restrict = _only_node(name) if rack is None else _only_rack(rack)
            res = _place_gang(job, demands, state, index, ctx, restrict)
            if res is not None:
                return res
        return None
    return _place_gang(job, demands, state, index, ctx, None)


def _only_node(name: str) -> Callable[[Node], bool]:
    return lambda n: n.name == name


def _only_rack(rack: str) -> Callable[[Node], bool]:
    return lambda n: n.rack == rack


@reads("network")
def _fast_only(n: Node) -> bool:
    return n.network in FAST_NETWORKS


def _first_replica_nodes(
    job: JobRequest, demands: list[Demand], state: ClusterState, index: CapacityIndex,
    ctx: PlacementContext,
) -> list[str]:
    """Best-scored candidate nodes for the first replica, best first (bounded)."""
    scored = []
    for d in demands:
        for sc, name, _ in _candidates(job, d, state, index, ctx, {}, set(), None):
            scored.append((sc, name))
    scored.sort(key=lambda x: -x[0])
    out: list[str] = []
    for _, n in scored:
        if n not in out:
            out.append(n)
    return out[: ctx.config.candidates_per_replica]


# -- gangs ---------------------------------------------------------------------
def _place_gang(
    job: JobRequest, demands: list[Demand], state: ClusterState, index: CapacityIndex,
    ctx: PlacementContext, restrict: Restrict,
) -> Placed | None:
    cheapest_first = mode_of(job).cheapest_first
    # a gang's replicas are reserved on a trial copy as they are chosen, so the next
    # replica sees them; one replica has no next one: nothing to reserve and roll back
    # (the engine reserves the admitted placement once; this saved 2 of every 3
    # capacity-index updates of a cycle of single-replica jobs)
    single = job.replicas == 1
    trial: AbstractContextManager[list[ReplicaPlacement]] = (
        nullcontext([]) if single else state.trial()
    )
    with trial as placed:
        total = 0.0
        gang_nodes: dict[str, int] = {}
        gang_racks: set[str] = set()
        def pick(trust_cache: bool) -> Choice | None:
            best: Choice | None = None
            tier_units: float | None = None
            for d in demands:
                if cheapest_first and best is not None and tier_units is not None and (
                    d.units > tier_units + EPS
                ):
                    break
                for sc, name, p in _candidates(job, d, state, index, ctx, gang_nodes,
                                               gang_racks, restrict, trust_cache):
                    if best is None or sc > best[0]:
                        best = (sc, name, p, d)
                        tier_units = d.units
            return best

        for r in range(job.replicas):
            best = _chosen(pick, job, state, ctx)
            if best is None:
                break
            sc, name, made, d = best
            assert made is not None  # _chosen makes the winner's placement
            p = _renumber(made, r)
            if not single:
                state.apply(p)
            placed.append(p)
            total += sc
            gang_nodes[p.node] = gang_nodes.get(p.node, 0) + 1
            rack = state.nodes[p.node].rack
            if rack is not None:
                gang_racks.add(rack)
        if len(placed) < job.min_available:
            return None
        return Placed(list(placed), total)


def _chosen(pick: Callable[[bool], Choice | None], job: JobRequest, state: ClusterState,
            ctx: PlacementContext) -> Choice | None:
    """The best candidate of ``pick(trust_cache)``, with its placement made on its node;
    when that node's exact numbers refuse it (:func:`_made`), the pick again without the
    cache, every state's node filtered."""
    best = pick(True)
    if best is None or best[2] is not None:
        return best
    made = _made(job, best[3], state, best[1], ctx)
    return (best[0], best[1], made, best[3]) if made is not None else pick(False)


def _made(job: JobRequest, d: Demand, state: ClusterState, name: str,
          ctx: PlacementContext) -> ReplicaPlacement | None:
    """The placement of a candidate chosen by its state's cached answers. Nodes of one state
    pass the same filters (:mod:`app.scheduling.node_reads`), up to the rounding of CPU,
    memory and shares in the signature (6 decimals, where the filters allow 1e-9): None
    when the node's exact numbers refuse it, and the caller then asks without the cache."""
    gt = ctx.gpu_types.get(d.gpu_type) if d.gpu_type else None
    return fit_on_node(job, d, state.nodes[name], gt, ctx)


def _renumber(p: ReplicaPlacement, replica: int) -> ReplicaPlacement:
    if p.replica == replica:
        return p
    return ReplicaPlacement(replica, p.node, p.gpu_type, p.devices, p.mig, p.share,
                            p.share_memory_gb, p.units, p.cpu, p.memory_gb)


def _node_names(
    job: JobRequest, d: Demand, state: ClusterState, index: CapacityIndex,
    gang_nodes: dict[str, int], cpu_on_gpu_nodes: bool = False,
) -> Iterator[str]:
    spread = job.placement == "spread"
    if gang_nodes and not spread:
        yield from list(gang_nodes)
    yield from d.how.node_names(d, index, spread, cpu_on_gpu_nodes)


def _candidates(
    job: JobRequest, d: Demand, state: ClusterState, index: CapacityIndex, ctx: PlacementContext,
    gang_nodes: dict[str, int], gang_racks: set[str], restrict: Restrict,
    trust_cache: bool = True,
) -> list[Candidate]:
    """Up to ``candidates_per_replica`` feasible placements of one replica, scored.

    Nodes that look alike to every score (same free cards, free CPU and
    memory, same standing towards the gang) are scored once: in a large
    cluster most nodes are identical, and scoring a thousand empty nodes
    tells nothing the first did not. After the first feasible node, the
    walk looks at no more than ``2 x candidates_per_replica`` nodes.
    """
    if not gang_nodes and restrict is None and d.how.by_state:
        return _state_candidates(job, d, state, index, ctx, trust_cache)
    limit = ctx.config.candidates_per_replica
    budget = 2 * limit
    spread = job.placement == "spread"
    out: list[Candidate] = []
    seen: set[str] = set()
    sigs: set[tuple] = set()
    gt = ctx.gpu_types.get(d.gpu_type) if d.gpu_type else None
    nodes = state.nodes
    caps = index.caps
    for name in _node_names(job, d, state, index, gang_nodes,
                            ctx.config.cpu_jobs_on_gpu_nodes):
        if out:
            budget -= 1
            if budget <= 0:
                break
        if name in seen:
            continue
        seen.add(name)
        if spread and name in gang_nodes:
            continue
        node = nodes[name]
        if restrict is not None and not restrict(node):
            continue
        cap = caps[name]
        # the gang context is what the topology score reads of a node's name and rack
        sig = (node_signature(node), name in gang_nodes, node.rack in gang_racks)
        if sig in sigs and not cap.mig_free:
            continue
        p = fit_on_node(job, d, node, gt, ctx)
        if p is None:
            continue
        sigs.add(sig)
        out.append((score(job, d, node, cap, p, ctx, gang_nodes, gang_racks), name, p))
        if len(out) >= limit:
            break
    return out


HOLD_TRIES = 4  # nodes of one state tried when holds turn the first ones away


def _state_candidates(
    job: JobRequest, d: Demand, state: ClusterState, index: CapacityIndex, ctx: PlacementContext,
    trust_cache: bool = True,
) -> list[Candidate]:
    """One candidate per distinct node state (:func:`~app.scheduling.node_reads.node_signature`),
    scored.

    A replica outside a gang scores the same on every node of a state, so
    scoring one node per state scores every candidate the cluster offers;
    that is what the fragmentation score needs (the best node for the
    expected mix is rarely among the first few a bucket walk meets). Whether
    a state fits, and its score, are cached in the context by (request shape,
    state), the shape being what :func:`fit_on_node` and :func:`score` declare
    they read of the request (:data:`STATE_READS`): between two placements only
    the touched node's state is new, and the placement itself is made for the
    winner alone (:func:`_made`). Holds (reservations) are per node, not per
    state: while there are any, or when the caller does not ``trust_cache`` (a
    winner's node refused it), each state's nodes are filtered as they come
    (only the score is then read from the cache). ``candidate_states`` (0 =
    all) caps the states scored per replica.
    """
    cap_states = ctx.config.candidate_states
    gt = ctx.gpu_types.get(d.gpu_type) if d.gpu_type else None
    if d.how.on_card:
        types: list[str | None] = [d.gpu_type or ""]
    elif ctx.config.cpu_jobs_on_gpu_nodes:
        types = index.group_types()
    else:  # a job without GPUs: CPU-only nodes
        types = [None]
    shape = (STATE_READS(job), d)
    cache = ctx.score_cache
    nodes = state.nodes
    caps = index.caps
    holds = ctx.holds
    avoid = job.avoid_nodes
    out: list[Candidate] = []
    for t in types:
        # (shape, type) -> state -> score, None where the state does not fit (the shape is
        # hashed once per replica, not once per state; a CPU-only demand sees every type)
        by_state = cache.get((shape, t))
        if by_state is None:
            if len(cache) > 20_000:
                cache.clear()
            by_state = cache[(shape, t)] = {}
        elif len(by_state) > 20_000:
            by_state.clear()
        for sig, names in index.groups_of(t):
            p: ReplicaPlacement | None = None
            name = ""
            if not holds and trust_cache:
                name = next((n for n in names if n not in avoid), "") if avoid else (
                    next(iter(names), ""))
                if not name:
                    continue  # every node of the state is avoided
                sc = by_state.get(sig, _UNSEEN)
                if sc is _UNSEEN:
                    p = fit_on_node(job, d, nodes[name], gt, ctx)
                    sc = by_state[sig] = None if p is None else score(
                        job, d, nodes[name], caps[name], p, ctx, {}, set())
                if sc is None:
                    continue  # the state does not fit the replica
            else:
                tries = 0
                for name in names:
                    if name in avoid:
                        continue  # the state's other nodes score the same
                    tries += 1
                    if tries > HOLD_TRIES:
                        break
                    p = fit_on_node(job, d, nodes[name], gt, ctx)
                    if p is not None or not holds:
                        break
                if p is None:
                    continue
                sc = by_state.get(sig)
                if sc is None:
                    sc = by_state[sig] = score(job, d, nodes[name], caps[name], p, ctx, {},
                                               set())
            out.append((sc, name, p))  # type: ignore[arg-type]
            if cap_states and len(out) >= cap_states:
                return out
    return out


_UNSEEN = object()  # not in the score cache (None there: the state does not fit)


@reads("gpu_type")  # and what the filters it calls declare
@reads_job("cpu", "memory_gb", "tolerations", "node_selector")  # avoid_nodes: by node name
def fit_on_node(
    job: JobRequest, d: Demand, node: Node, gt: GpuType | None, ctx: PlacementContext,
    cpu: float | None = None, memory_gb: float | None = None,
) -> ReplicaPlacement | None:
    """Filter one node for one replica; returns what the replica would take there."""
    cpu = job.cpu if cpu is None else cpu
    mem = job.memory_gb if memory_gb is None else memory_gb
    if node.name in job.avoid_nodes:  # its kubelet refused the job a moment ago
        return None
    if not node_fits_host(node, cpu, mem):
        return None
    if node.taints and not tolerates(job, node):
        return None
    if job.node_selector and not selects(job, node):
        return None
    how = d.how
    if how.on_card:
        if node.gpu_type != d.gpu_type:
            return None
    elif node.gpu_type is not None and not ctx.config.cpu_jobs_on_gpu_nodes:
        return None  # a job without GPUs runs on CPU-only nodes (SchedulerConfig)
    hold = ctx.holds.get(node.name) if ctx.holds else None
    if hold is not None and not ctx.may_use_hold(job, hold) and not _leaves_hold(
        d, node, hold, cpu, mem
    ):
        return None
    return how.take(d, node, gt, cpu, mem)


def _leaves_hold(d: Demand, node: Node, hold: Hold, cpu: float, mem: float) -> bool:
    """May a job that does not qualify use this held node? Only around the held part."""
    how = d.how
    if how.partial_card or (hold.full and how.on_card):
        return False
    free = sum(1 for dev in node.devices if dev.is_free_whole)
    taken = how.whole_taken(d)
    return (
        free - taken >= hold.cards
        and node.cpu_free - cpu + EPS >= hold.cpu
        and node.memory_free_gb - mem + EPS >= hold.memory_gb
    )


# -- gpu_units ---------------------------------------------------------------------
def _place_units(
    job: JobRequest, units: float, state: ClusterState, index: CapacityIndex,
    ctx: PlacementContext, types: list[GpuType],
) -> Placed | None:
    """``units`` CU of whole cards: least CU overshoot first; one replica per node used;
    one type unless mixing allowed."""
    free = {t.name: index.free_whole_total(t.name) for t in types}
    combos = unit_combos(units, types, free, job.allow_mixed_types)
    if not combos:
        return None
    by_name = {t.name: t for t in types}

    def key(c: UnitCombo) -> tuple[float, float, float, int]:
        waste = sum(
            memory_waste(job, Demand(n, "whole", memory_gb=by_name[n].memory_gb), ctx) * k
            for n, k in c.cards
        ) / max(c.n_cards, 1)
        pref = sum(ctx.type_preference(job.pool, n) * k for n, k in c.cards) / max(c.n_cards, 1)
        return (round(c.overshoot, 6), waste - pref * ctx.config.w_type_preference, 0.0,
                c.n_cards)

    combos.sort(key=key)
    for combo in combos:
        res = _place_combo(job, combo, state, index, ctx, by_name)
        if res is not None:
            return res
    return None


def _place_combo(
    job: JobRequest, combo: UnitCombo, state: ClusterState, index: CapacityIndex,
    ctx: PlacementContext, by_name: dict[str, GpuType],
) -> Placed | None:
    n_total = combo.n_cards
    cpu_per = job.cpu / n_total
    mem_per = job.memory_gb / n_total
    single_type = len(combo.cards) == 1
    if single_type:
        t, n = combo.cards[0]
        d = Demand(t, "whole", count=n, units=by_name[t].weight * n,
                   memory_gb=by_name[t].memory_gb)
        def pick(trust_cache: bool) -> Choice | None:
            best: Choice | None = None
            for sc, name, p in _candidates(job, d, state, index, ctx, {}, set(), None,
                                           trust_cache):
                if best is None or sc > best[0]:
                    best = (sc, name, p, d)
            return best

        chosen = _chosen(pick, job, state, ctx)
        if chosen is not None:
            assert chosen[2] is not None  # _chosen makes the winner's placement
            return Placed([chosen[2]], chosen[0])
        if job.topology == "same_node":
            return None
    if job.topology == "same_node":
        return None
    restrict: Restrict = _fast_only if job.topology == "fast_network" else None
    if job.topology == "same_rack":
        racks: dict[str, int] = {}
        for t, _ in combo.cards:
            for name in index.nodes_with_whole(t, 1):
                r = state.nodes[name].rack
                if r is not None:
                    racks[r] = racks.get(r, 0) + index.caps[name].free_whole
        for rack in sorted(racks, key=lambda r: -racks[r]):
            res = _greedy_multi(job, combo, state, index, ctx, by_name, cpu_per, mem_per,
                                _only_rack(rack))
            if res is not None:
                return res
        return None
    return _greedy_multi(job, combo, state, index, ctx, by_name, cpu_per, mem_per, restrict)


def _greedy_multi(
    job: JobRequest, combo: UnitCombo, state: ClusterState, index: CapacityIndex,
    ctx: PlacementContext, by_name: dict[str, GpuType], cpu_per: float, mem_per: float,
    restrict: Restrict,
) -> Placed | None:
    """Fewest nodes: largest free blocks first, the last chunk on the tightest block."""
    with state.trial() as placed:
        replica = 0
        for t, n in combo.cards:
            gt = by_name[t]
            remaining = n
            while remaining > 0:
                chosen: ReplicaPlacement | None = None
                # tightest node that finishes this type's share, else the largest block
                order: Iterable[str] = index.nodes_with_whole(t, remaining)
                for attempt in (0, 1):
                    for name in order:
                        node = state.nodes[name]
                        if restrict is not None and not restrict(node):
                            continue
                        take = min(remaining, index.caps[name].free_whole)
                        by_cpu = math.floor((node.cpu_free + EPS) / cpu_per) if cpu_per else take
                        by_mem = math.floor((node.memory_free_gb + EPS) / mem_per) if (
                            mem_per) else take
                        take = min(take, by_cpu, by_mem)
                        if take <= 0 or (attempt == 0 and take < remaining):
                            continue
                        d = Demand(t, "whole", count=take, units=gt.weight * take,
                                   memory_gb=gt.memory_gb)
                        p = fit_on_node(job, d, node, gt, ctx, cpu=cpu_per * take,
                                        memory_gb=mem_per * take)
                        if p is not None:
                            chosen = _renumber(p, replica)
                            break
                    if chosen is not None:
                        break
                    order = index.nodes_with_whole(t, 1, largest_first=True)
                if chosen is None:
                    return None
                state.apply(chosen)
                placed.append(chosen)
                replica += 1
                remaining -= len(chosen.devices)
        nodes = {p.node for p in placed}
        if len(nodes) > 1 and job.topology == "fast_network" and not all(
            state.nodes[n].network in FAST_NETWORKS for n in nodes
        ):
            return None
        return Placed(list(placed), -float(len(nodes)))


# What a node state's cached answers (fits or not, and the score) depend on of a request
STATE_READS = job_view(score, fit_on_node)
