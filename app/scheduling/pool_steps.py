"""The engine's pool/lease/preemption steps, kept small so the cycle reads
as numbered steps: (2) reclaim expired leases, (4b) charge an admission to
its pool (creating leases), (4c) preempt to make a job fit.

The engine owns the working state and its ledgers (:class:`Books`); these
steps change them only through the books and a statement, so they never
forget one of them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import replace

from app.scheduling.books import Books, holding
from app.scheduling.fair_share import FairShareRule
from app.scheduling.leases import (
    expired_leases,
    lease_expiry,
    lease_policy,
    outlast_notes,
    pools_below_guarantee,
    reclaim_at_expiry,
)
from app.scheduling.model import (
    Admission,
    CycleResult,
    JobRequest,
    LeaseInfo,
    LeaseReturn,
    Preemption,
    ReplicaPlacement,
    RunningJob,
    Snapshot,
)
from app.scheduling.pools import Charge, PoolLedger, lease_grants
from app.scheduling.preemption import (
    Candidate,
    PlaceFn,
    VictimPool,
    VictimTrial,
    candidates,
    find_victims,
    node_groups,
    to_preemptions,
)
from app.scheduling.quota import units_by_type
from app.scheduling.state import EPS, ClusterState
from app.scheduling.verdicts import Reason

AcceptFn = Callable[[Sequence[ReplicaPlacement]], bool]


def return_leases(snap: Snapshot, pools: PoolLedger) -> tuple[Snapshot, list[LeaseReturn]]:
    """Step 1b, before any reclaim: a borrowed charge that now fits in the
    borrower pool's own free guarantee moves there (the lease ends
    ``returned``; the job keeps running). Leases that expire first are moved
    first, a lease only as a whole. ``pools`` is updated; the snapshot comes
    back with the returned leases gone from its running jobs, so no later
    step of the cycle can reclaim them."""
    leased = [r for r in snap.running if r.leases]
    if not leased:
        return snap, []
    out: list[LeaseReturn] = []
    kept: dict[str, tuple[LeaseInfo, ...]] = {}
    # job by job, the job whose lease expires first first (for a job with one lease,
    # the order of its lease); within a job, its leases in the order they expire
    for r in sorted(leased, key=lambda r: min((x.expires_at, x.id) for x in r.leases)):
        pool = r.request.pool
        taken: dict[str, float] = {}
        moves: list[tuple[LeaseInfo, float]] = []
        for x in sorted(r.leases, key=lambda x: (x.expires_at, x.id)):
            room = pools.own_headroom(pool, x.gpu_type) - taken.get(x.gpu_type, 0.0)
            if x.units <= room + EPS:
                moves.append((x, room))
                taken[x.gpu_type] = taken.get(x.gpu_type, 0.0) + x.units
        moved = {x.id for x, _ in moves}
        if r.request.preemptible and any(
            x.id not in moved and lease_policy(snap.pools, x) == "always"
            for x in expired_leases(r, snap.now)
        ):
            # an expired lease that cannot return gets the job reclaimed this cycle:
            # returning its other leases would tell it "keeps running" as it is stopped
            continue
        for x, room in moves:
            pools.return_lease(r.request.id, x.lender, x.gpu_type, x.units)
            out.append(
                LeaseReturn(
                    lease_id=x.id, job_id=r.request.id, borrower=pool, lender=x.lender,
                    gpu_type=x.gpu_type, units=x.units,
                    reason=(
                        f"lease {x.id} returned to pool {x.lender}: its {x.units:g} CU of "
                        f"{x.gpu_type} now fit in pool {pool}'s own guarantee ({room:g} CU "
                        "free); the job keeps running"
                    ),
                )
            )
        if moves:
            kept[r.request.id] = tuple(y for y in r.leases if y.id not in moved)
    if not out:
        return snap, []
    running = [
        replace(r, leases=kept[r.request.id]) if r.request.id in kept else r
        for r in snap.running
    ]
    return replace(snap, running=running), out


def reclaim_only(snap: Snapshot) -> CycleResult:
    """The lease reaper's decision: steps 1b and 2 of the cycle (a lease that
    fits the borrower's own guarantee is returned, never reclaimed)."""
    snap, returned = return_leases(snap, PoolLedger.from_snapshot(snap))
    return CycleResult(preemptions=reclaim_at_expiry(snap), returned=returned)


def reclaim_expired(snap: Snapshot, books: Books) -> list[Preemption]:
    """Step 2: preempt holders of expired ``always`` leases; free their capacity."""
    by_id = {r.request.id: r for r in snap.running}
    out = reclaim_at_expiry(snap)
    for p in out:
        books.release(by_id[p.job_id])
    return out


def charge(
    job: JobRequest, placed: Sequence[ReplicaPlacement], pools: PoolLedger, snap: Snapshot
) -> Admission | Reason:
    """Step 4b: how the job's pool pays for a placement (the admission, with its
    leases and a note when the job is expected to outlast them), or why it cannot.
    Nothing is charged yet: the caller reserves the admission in the books
    (:func:`app.scheduling.books.holding`)."""
    need = units_by_type(placed)
    wait = borrow_wait(job, snap)
    plan = pools.plan(job, need, may_borrow=wait <= 0, borrow_wait_s=wait)
    if not isinstance(plan, Charge):
        return plan
    expiry = {
        lender: lease_expiry(snap.pools, snap.now, job.pool, lender)
        for lender, _t, _u in plan.leases
    }
    return Admission(
        job_id=job.id,
        placements=tuple(placed),
        leases=lease_grants(plan, expiry),
        notes=outlast_notes(job, expiry, snap.now),
    )


def may_borrow(job: JobRequest, snap: Snapshot) -> bool:
    """A job whose lease was reclaimed waits ``thrash_window_s`` before borrowing
    again, so ``reclaim: always`` does not turn into restart-every-expiry."""
    return borrow_wait(job, snap) <= 0


def borrow_wait(job: JobRequest, snap: Snapshot) -> float:
    """Seconds until :func:`may_borrow` (0: it may now), for the reason it reads."""
    at = job.last_reclaimed_at
    return 0.0 if at is None else max(0.0, at + snap.config.thrash_window_s - snap.now)


def may_preempt_anyone(
    job: JobRequest, snap: Snapshot, lowest_victim: int, any_lease: bool
) -> bool:
    """O(1) pre-check so a huge backlog does not pay for a victim search:
    the job outranks some preemptible running job, or some lease could be
    reclaimable (``lowest_victim``/``any_lease`` are computed once a cycle)."""
    return job.priority_value > lowest_victim or any_lease


def preempt_for(
    job: JobRequest,
    snap: Snapshot,
    books: Books,
    place: PlaceFn,
    gone: set[str],
    type_names: Collection[str] | None,
    accept: AcceptFn | None = None,
    victims_pool: VictimPool | None = None,
    fair: FairShareRule | None = None,
) -> tuple[list[Preemption], Admission] | None:
    """Step 4c: stop the cheapest minimal victim set and admit ``job`` in
    their place (reserved in every book), or change nothing and return None.
    ``accept`` adds the caller's own checks (team quota) to the what-if;
    ``fair`` allows same-priority victims (fair-share preemption, the engine's
    rule)."""
    victims = choose_victims(job, snap, books, place, gone, type_names, accept,
                             victims_pool, fair)
    if victims is None:
        return None
    stmt = books.statement()
    for v in victims:
        stmt.release(v.job)
    placed = place(job, books.state)
    adm = charge(job, placed, books.pools, snap) if placed is not None else None
    if not isinstance(adm, Admission):  # cannot happen after a positive what-if; undo
        stmt.discard()
        return None
    stmt.reserve(holding(job, adm, snap.now))
    stmt.commit()
    gone.update(v.id for v in victims)
    return to_preemptions(job, victims), adm


def choose_victims(
    job: JobRequest,
    snap: Snapshot,
    books: Books,
    place: PlaceFn,
    gone: Collection[str],
    type_names: Collection[str] | None,
    accept: AcceptFn | None = None,
    victims_pool: VictimPool | None = None,
    fair: FairShareRule | None = None,
) -> list[Candidate] | None:
    """The victims :func:`preempt_for` would stop for ``job`` at ``snap.now`` (None: no
    set makes room under the rules), the books left unchanged. With a snapshot moved
    to a later ``now`` it is the preemptor's verdict at that time if nothing else
    changes meanwhile: what a waiting job's reason may promise (engine.py)."""
    pool = victims_pool or VictimPool(snap.running, snap.now, pools_below_guarantee(snap))
    w = VictimTrial(job, books, _accepting(place, accept), may_borrow(job, snap))
    single = job.replicas == 1 or job.min_available == 1
    groups = (
        node_groups(job, snap, pool, books.state, type_names, gone, fair) if single else None
    )
    victims = find_victims(
        job, lambda: candidates(job, snap, pool, type_names, exclude=gone, fair=fair), w,
        groups=groups,
    )
    if not victims:
        return None
    if fair is not None and not fair.within_budget([v.job for v in victims if v.fair]):
        return None
    return victims


def why_no_room(
    job: JobRequest,
    snap: Snapshot,
    books: Books,
    place: PlaceFn,
    stoppable: Sequence[RunningJob],
    accept: AcceptFn | None = None,
) -> str:
    """Why ``job`` would still not run with every job in ``stoppable`` stopped: the pool's
    reason (e.g. a non-preemptible job does not borrow), the caller's check (the team
    quota), or the place being held by jobs it may not preempt. The books are left
    unchanged."""
    w = VictimTrial(job, books, place, may_borrow(job, snap))
    try:
        for r in stoppable:
            w.remove(r)
        placed = place(job, w.state)
        if placed is None:
            return "the rest of the room it needs is held by jobs it may not preempt"
        plan = w.pools.plan(job, units_by_type(placed), w.may_borrow)
        if not isinstance(plan, Charge):
            return plan  # the pool's Reason (its code tells the caller which fix applies)
        if accept is not None and not accept(placed):
            return f"team {job.team}'s quota would not cover it"
        return "the victims' minimum run time and the thrash guard leave no set that frees it"
    finally:
        w.restore_all()


def _accepting(place: PlaceFn, accept: AcceptFn | None) -> PlaceFn:
    if accept is None:
        return place

    def wrapped(job: JobRequest, state: ClusterState) -> list[ReplicaPlacement] | None:
        placed = place(job, state)
        return placed if placed is not None and accept(placed) else None

    return wrapped
