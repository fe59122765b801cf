"""One scheduling cycle: order, admit (quota, then placement), explain.

This is the first, simple core: whole GPUs (and CPU-only work), memory
fit, allowed types, team quota in CU, priority then FIFO, gangs
all-or-nothing. The full policy replaces the internals behind
:func:`schedule`; callers only rely on ``Snapshot -> CycleResult``.
"""

from __future__ import annotations

from collections import defaultdict

from app.scheduling.model import (
    Admission,
    CycleResult,
    GpuType,
    JobRequest,
    Node,
    ReplicaPlacement,
    Snapshot,
)
from app.scheduling.pool_steps import charge, preempt_for, reclaim_expired
from app.scheduling.pools import PoolLedger
from app.scheduling.state import EPS, ClusterState
from app.scheduling.units import whole_cards


def allowed_types(job: JobRequest, snap: Snapshot) -> list[GpuType]:
    """GPU types a job may use: its own list, its pool's, minus avoided, memory fit."""
    pool = snap.pools.get(job.pool)
    names = list(job.gpu_types) or (list(pool.gpu_types) if pool and pool.gpu_types else [])
    if not names:
        names = list(snap.gpu_types)
    if pool and pool.gpu_types and job.gpu_types:
        names = [n for n in names if n in pool.gpu_types]
    out = []
    for n in names:
        t = snap.gpu_types.get(n)
        if t is None or n in job.avoid_gpu_types:
            continue
        if t.memory_gb + EPS < job.min_gpu_memory_gb:
            continue
        out.append(t)
    return out


def order_pending(snap: Snapshot) -> list[JobRequest]:
    return sorted(snap.pending, key=lambda j: (-j.priority_value, j.submitted_at, j.id))


def _fits_node(job: JobRequest, node: Node, gpu_type: GpuType | None) -> list[int] | None:
    if not node.schedulable:
        return None
    if node.cpu_free + EPS < job.cpu or node.memory_free_gb + EPS < job.memory_gb:
        return None
    need = job.gpus or 0
    if need == 0:
        return []
    if gpu_type is None or node.gpu_type != gpu_type.name:
        return None
    free = node.free_whole_devices()
    if len(free) < need:
        return None
    return free[:need]


def _place_gang(
    job: JobRequest, state: ClusterState, types: list[GpuType], snap: Snapshot
) -> list[ReplicaPlacement] | None:
    """All replicas or none: reserve on the working copy, roll back on failure."""
    placed: list[ReplicaPlacement] = []
    candidate_types: list[GpuType | None] = list(types) if (job.gpus or 0) > 0 else [None]
    for gpu_type in candidate_types:
        placed = []
        for replica in range(job.replicas):
            chosen: ReplicaPlacement | None = None
            for node in state.nodes.values():
                if gpu_type is None and (job.gpus or 0) == 0:
                    devs = _fits_node(job, node, None)
                else:
                    devs = _fits_node(job, node, gpu_type)
                if devs is None:
                    continue
                chosen = ReplicaPlacement(
                    replica=replica,
                    node=node.name,
                    gpu_type=gpu_type.name if gpu_type and devs else None,
                    devices=tuple(devs),
                    units=whole_cards(gpu_type, len(devs)) if gpu_type else 0.0,
                    cpu=job.cpu,
                    memory_gb=job.memory_gb,
                )
                break
            if chosen is None:
                break
            state.reserve(chosen)
            placed.append(chosen)
        if len(placed) >= job.min_available:
            return placed
        for p in placed:
            state.unreserve(p)
    return None


def _never_fits(job: JobRequest, snap: Snapshot, types: list[GpuType]) -> str | None:
    if job.mode != "gpus":
        return None
    need = job.gpus or 0
    if need > 0 and not types:
        return (
            f"no allowed GPU type has >= {job.min_gpu_memory_gb:g} GB memory "
            f"(allowed: {', '.join(job.gpu_types) or 'any'})"
        )
    names = {t.name for t in types}
    for node in snap.nodes:
        if node.cpu < job.cpu or node.memory_gb < job.memory_gb:
            continue
        if need == 0 or (node.gpu_type in names and len(node.devices) >= need):
            return None
    return (
        f"no node of an allowed type can hold one replica "
        f"({need} GPU(s), {job.cpu:g} CPU, {job.memory_gb:g} GB memory)"
    )


def schedule(snap: Snapshot) -> CycleResult:
    """Run one cycle on the snapshot and return the decisions."""
    result = CycleResult()
    # 1. working state and ledgers
    state = ClusterState.from_snapshot(snap)
    ledger = PoolLedger.from_snapshot(snap)
    team_used: dict[str, float] = defaultdict(float)
    for r in snap.running:
        team_used[r.request.team] += r.units
    # 2. reclaim expired leases (reclaim: always)
    gone = reclaim_expired(snap, state, ledger, result)
    for r in snap.running:
        if r.request.id in gone:
            team_used[r.request.team] -= r.units
    by_id = {r.request.id: r for r in snap.running}

    def place(job: JobRequest, st: ClusterState) -> list[ReplicaPlacement] | None:
        return _place_gang(job, st, allowed_types(job, snap), snap)

    # 3. order, 4. admit each job: team quota -> placement -> pool quota -> [preempt]
    for job in order_pending(snap):
        result.order.append(job.id)
        types = allowed_types(job, snap)
        never = _never_fits(job, snap, types)
        if never:
            result.unschedulable[job.id] = never
            continue
        if job.mode != "gpus":
            result.reasons[job.id] = f"request mode {job.mode} is not supported by this core yet"
            continue
        team = snap.teams.get(job.team)

        def team_ok(placed, job=job, team=team) -> bool:
            units = sum(p.units for p in placed)
            return not (
                team and team.quota_units is not None
                and team_used[job.team] + units > team.quota_units + EPS
            )

        placed = _place_gang(job, state, types, snap)
        why = ""
        if placed is not None and not team_ok(placed):
            for p in placed:
                state.unreserve(p)
            units = sum(p.units for p in placed)
            result.reasons[job.id] = (
                f"team {job.team} at quota {team_used[job.team]:g}/{team.quota_units:g} CU "
                f"(job needs {units:g})"
            )
            continue
        if placed is not None:
            adm = charge(job, placed, ledger, snap)
            if isinstance(adm, Admission):
                team_used[job.team] += adm.units
                result.admissions.append(adm)
                continue
            for p in placed:
                state.unreserve(p)
            why = adm
        else:
            why = (
                f"needs {job.replicas} x {job.gpus} GPU(s) of "
                f"{', '.join(t.name for t in types) or 'any type'}; no free block large enough"
            )
        names = {t.name for t in types} if (job.gpus or 0) > 0 else None
        done = preempt_for(job, snap, state, ledger, place, gone, names, team_ok)
        if done is None:
            result.reasons[job.id] = why
            continue
        preemptions, adm = done
        for pr in preemptions:
            team_used[by_id[pr.job_id].request.team] -= by_id[pr.job_id].units
        result.preemptions.extend(preemptions)
        team_used[job.team] += adm.units
        result.admissions.append(adm)
    return result
