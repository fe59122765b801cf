"""The engine's pool/lease/preemption steps, kept small so the cycle reads
as numbered steps: (2) reclaim expired leases, (4a) charge an admission to
its pool (creating leases), (4c) preempt to make a job fit.

Each step keeps the working ClusterState and the PoolLedger in step with
the decisions it appends to the CycleResult.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from app.scheduling.leases import lease_expiry, outlast_notes, reclaim_at_expiry
from app.scheduling.model import (
    Admission,
    CycleResult,
    JobRequest,
    Preemption,
    ReplicaPlacement,
    RunningJob,
    Snapshot,
)
from app.scheduling.pools import Charge, PoolLedger, lease_grants, units_by_type
from app.scheduling.preemption import PlaceFn, candidates, find_victims, make_fits, to_preemptions
from app.scheduling.state import ClusterState

AcceptFn = Callable[[Sequence[ReplicaPlacement]], bool]


def _stop(r: RunningJob, state: ClusterState, ledger: PoolLedger) -> None:
    for p in r.placements:
        if p.node in state.nodes:
            state.unreserve(p)
    ledger.remove(r.request.id)


def reclaim_expired(
    snap: Snapshot, state: ClusterState, ledger: PoolLedger, result: CycleResult
) -> set[str]:
    """Step 2: preempt holders of expired ``always`` leases; free their capacity."""
    by_id = {r.request.id: r for r in snap.running}
    gone: set[str] = set()
    for p in reclaim_at_expiry(snap):
        _stop(by_id[p.job_id], state, ledger)
        result.preemptions.append(p)
        gone.add(p.job_id)
    return gone


def charge(
    job: JobRequest, placed: Sequence[ReplicaPlacement], ledger: PoolLedger, snap: Snapshot
) -> Admission | str:
    """Step 4a: pay for a placement from the job's pool, or say why it cannot.
    On success the ledger holds the charge and the admission carries the leases."""
    need = units_by_type(placed)
    plan = ledger.plan(job, need)
    if not isinstance(plan, Charge):
        return plan
    expiry = {
        lender: lease_expiry(snap.pools, snap.now, job.pool, lender)
        for lender, _t, _u in plan.leases
    }
    ledger.commit(job.id, plan, need)
    return Admission(
        job_id=job.id,
        placements=tuple(placed),
        leases=lease_grants(plan, expiry),
        notes=outlast_notes(job, expiry, snap.now),
    )


def preempt_for(
    job: JobRequest,
    snap: Snapshot,
    state: ClusterState,
    ledger: PoolLedger,
    place: PlaceFn,
    gone: set[str],
    type_names: Collection[str] | None,
    accept: AcceptFn | None = None,
) -> tuple[list[Preemption], Admission] | None:
    """Step 4c: stop the cheapest minimal victim set and admit ``job`` in
    their place, or change nothing and return None.

    ``accept`` adds the caller's own checks (team quota) to the what-if."""
    running = [r for r in snap.running if r.request.id not in gone]
    cands = candidates(job, snap, running, type_names, exclude=gone)
    if not cands:
        return None
    base_fits = make_fits(job, state, ledger, _accepting(place, accept))
    victims = find_victims(cands, base_fits)
    if not victims:
        return None
    for v in victims:
        _stop(v.job, state, ledger)
    placed = place(job, state)
    adm = charge(job, placed, ledger, snap) if placed is not None else "no fit"
    if isinstance(adm, str):  # cannot happen after a positive what-if; undo
        for p in placed or []:
            state.unreserve(p)
        for v in victims:
            for p in v.job.placements:
                if p.node in state.nodes:
                    state.reserve(p)
            ledger.add_running(v.job)
        return None
    gone.update(v.id for v in victims)
    return to_preemptions(job, victims), adm


def _accepting(place: PlaceFn, accept: AcceptFn | None) -> PlaceFn:
    if accept is None:
        return place

    def wrapped(job: JobRequest, state: ClusterState) -> list[ReplicaPlacement] | None:
        placed = place(job, state)
        if placed is not None and not accept(placed):
            for p in placed:
                state.unreserve(p)
            return None
        return placed

    return wrapped
