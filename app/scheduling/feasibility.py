"""Feasibility at submit: what the catalog alone says can never run, with the fix.

Why at submit: a request that no cluster state could ever run (100 GB on 80 GB cards,
a gang larger than the cluster, a type outside the pool, a non-preemptible job larger
than what its pool may ever give it) used to be accepted as ``pending`` and turned
``unschedulable`` a cycle later, with the CLI exiting 0. The judgement is the
scheduler's own (:func:`app.scheduling.reasons.never_fits` on the full inventory, the
pool ledger's rule that P0 jobs never borrow), so a 422 here is exactly a job the
dispatcher would never start, and nothing that is merely waiting is refused.

Pure: the caller passes a :class:`~app.scheduling.model.Snapshot` of the catalog
(nodes, types, pools; nothing running).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from app.scheduling.context import PlacementContext
from app.scheduling.filters import allowed_types, selection_keys
from app.scheduling.model import JobRequest, Snapshot
from app.scheduling.modes import mode_of
from app.scheduling.pools import PoolLedger, capacity_by_type
from app.scheduling.reasons import StaticCapacity, never_fits

EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a submit is refused, what to change, and the field it is about."""

    reason: str
    fix: str
    field: str

    @property
    def detail(self) -> str:
        return f"{self.reason}; {self.fix}" if self.fix else self.reason


def _pool_fix(job: JobRequest, snap: Snapshot, static: StaticCapacity,
              ctx: PlacementContext, other_pools: Sequence[str]) -> str | None:
    """``pool: X`` when one of the team's other pools would run the request."""
    for p in other_pools:
        if p == job.pool or p not in snap.pools:
            continue
        alt = replace(job, pool=p)
        if never_fits(alt, static, ctx) is None and p0_refusal(alt, snap) is None:
            return f"set pool: {p} (team may use it, and it would run this request)"
    return None


def _type_fix(job: JobRequest, snap: Snapshot, static: StaticCapacity) -> str:
    """The types that exist with their card memory, so the user can pick one."""
    have = [t for t in snap.gpu_types.values() if t.name in static.by_type]
    listed = ", ".join(f"{t.name} ({t.memory_gb:g} GB)" for t in
                       sorted(have, key=lambda t: (-t.memory_gb, t.name)))
    return f"GPU types on the cluster: {listed or 'none'}"


def p0_refusal(job: JobRequest, snap: Snapshot) -> Refusal | None:
    """A non-preemptible job never borrows (app/scheduling/pools.py), so it runs only
    on its pool's guarantee plus the unguaranteed capacity; when even an empty cluster
    cannot give it that much of any allowed type, it would wait for ever."""
    if job.preemptible:
        return None
    pool = snap.pools.get(job.pool)
    if pool is None:
        return None
    types = [t for t in allowed_types(job, snap.gpu_types, snap.pools)]
    if not types:
        return None
    ledger = PoolLedger(snap.pools, capacity_by_type(snap))
    budgets = []
    mode = mode_of(job)
    for t in types:
        need = mode.guarantee_need(job, t)
        if need is None:  # a slice or a share: its charge is known only once placed
            return None
        most = ledger.guarantee(job.pool, t.name) + ledger.shared_total(t.name)
        if need <= most + EPS:
            return None
        budgets.append((t.name, need, ledger.guarantee(job.pool, t.name),
                        ledger.shared_total(t.name)))
    parts = "; ".join(f"{n}: needs {need:g} CU, guarantee {g:g} + unguaranteed {s:g}"
                      for n, need, g, s in budgets)
    return Refusal(
        reason=(f"a non-preemptible ({job.priority}) job never borrows, and pool {job.pool} "
                f"can never give it enough ({parts})"),
        fix=(f"submit it with a preemptible priority (e.g. priority: P1), or ask an admin "
             f"to raise pool {job.pool}'s guarantee of {budgets[0][0]}"),
        field="priority",
    )


def submit_refusal(job: JobRequest, snap: Snapshot,
                   other_pools: Sequence[str] = ()) -> Refusal | None:
    """None when some cluster state could run ``job``; else the reason and the fix.

    ``other_pools``: the pools the job's team may also use, tried for a suggestion."""
    static = StaticCapacity.of(snap.nodes)
    ctx = PlacementContext.from_snapshot(snap)
    why = never_fits(job, static, ctx)
    if why is None:
        p0 = p0_refusal(job, snap)
        alt = _pool_fix(job, snap, static, ctx, other_pools) if p0 else None
        return replace(p0, fix=f"{alt}; or {p0.fix}") if p0 and alt else p0
    field = "resources"
    fix = _pool_fix(job, snap, static, ctx, other_pools)
    if why.startswith("no node has") and "CPU and" in why and "GPU" not in why:
        field, fix = "resources", fix or "ask for at most the largest node's CPU and memory"
    elif "GPU type" in why or "GB memory" in why or "GPU of an allowed type" in why:
        field = "resources.gpu_types" if job.gpu_types else "resources.min_gpu_memory_gb"
        fix = fix or _type_fix(job, snap, static)
    elif why.startswith("no node has labels"):
        field = "pod_template"
        keys = selection_keys(job.node_selector)
        have = sorted({f"{k}={v}" for ls in static.label_sets for k, v in ls if k in keys})
        fix = fix or (f"select what some node has ({', '.join(have)})" if have else
                      f"no node has a label {' or '.join(keys) or '(none)'} at all")
    elif "replicas" in why or "same_node" in why:
        field = "replicas"
        fix = fix or "ask for fewer replicas (or fewer GPUs per replica)"
    return Refusal(reason=f"can never run on this cluster: {why}", fix=fix or "", field=field)
