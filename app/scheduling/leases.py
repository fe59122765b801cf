"""Borrow leases: their terms, expiry and the reclaim decisions.

A lease's terms are the stricter of its two pools': it expires after
``min(borrower.max_borrow_seconds, lender.max_borrow_seconds)`` and is
reclaimed ``always`` at expiry if either pool says ``always``, else only
``when_needed``: once expired, it is reclaimed as soon as the lender, or any
pool guaranteed that type and running below its guarantee (entitled to
it), has a pending job that the reclaimed
capacity would admit (the preemption step decides that, with the lease as a
candidate victim), and otherwise the borrower runs on.

The lender's bound: while a lease is active the lender's own jobs may wait
for that capacity, but never past the lease's expiry -- at expiry the lease
is reclaimed (always), or reclaimed for the first waiting job it would
admit (when_needed). Before expiry, only a job of higher priority than the
borrower can take the capacity back (ordinary priority preemption).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from app.scheduling.model import (
    JobRequest,
    LeaseInfo,
    PoolInfo,
    Preemption,
    RunningJob,
    Snapshot,
)
from app.scheduling.state import EPS
from app.scheduling.verdicts import Reason, ReasonCode

DEFAULT_MAX_BORROW_S = 1800.0


def lease_terms(
    pools: Mapping[str, PoolInfo], borrower: str, lender: str
) -> tuple[float, str]:
    """(max seconds, reclaim policy) of a lease between two pools."""
    b, ln = pools.get(borrower), pools.get(lender)
    secs = min(
        b.max_borrow_seconds if b else DEFAULT_MAX_BORROW_S,
        ln.max_borrow_seconds if ln else DEFAULT_MAX_BORROW_S,
    )
    always = (b is None or b.reclaim == "always") or (ln is None or ln.reclaim == "always")
    return secs, "always" if always else "when_needed"


def runtime_lower_bound(job: JobRequest) -> float | None:
    """Seconds the job is known to need, or None when nothing is known.

    Only a job that was stopped before it finished has a *known* bound: its
    longest such attempt, or its ``duration_estimate_s`` when that is larger
    (an estimate alone is a guess, so it only adds a note at admission)."""
    if job.longest_attempt_s is None:
        return None
    return max(job.longest_attempt_s, job.duration_estimate_s or 0.0)


def lease_outlived(
    pools: Mapping[str, PoolInfo], borrower: str, lender: str, bound: float | None
) -> bool:
    """Would a lease between these pools end before a job needing more than
    ``bound`` seconds could finish? (A job that ran ``bound`` seconds without
    finishing needs *more*, so a lease of exactly that length is too short.)"""
    return bound is not None and lease_terms(pools, borrower, lender)[0] <= bound + EPS


def lease_expiry(pools: Mapping[str, PoolInfo], now: float, borrower: str, lender: str) -> float:
    return now + lease_terms(pools, borrower, lender)[0]


def lease_policy(pools: Mapping[str, PoolInfo], lease: LeaseInfo) -> str:
    return lease_terms(pools, lease.borrower, lease.lender)[1]


def is_expired(lease: LeaseInfo, now: float) -> bool:
    return now + EPS >= lease.expires_at


def lease_text(x: LeaseInfo) -> str:
    """A lease as people read it in reasons and events. Durations, not instants:
    the core's clock is epoch seconds live (``t=1.76457e+09`` said nothing) and
    seconds from the start in a simulation; the event carries its own time."""
    name = x.id if x.id.startswith("lease") else f"lease {x.id}"  # simulated: "lease-3"
    return (
        f"{name} ({x.units:g} CU of {x.gpu_type} borrowed from pool {x.lender} "
        f"for {x.expires_at - x.started_at:g} s)"
    )


def expired_leases(r: RunningJob, now: float) -> list[LeaseInfo]:
    return [x for x in r.leases if is_expired(x, now)]


def reclaim_at_expiry(snap: Snapshot) -> list[Preemption]:
    """Step 2 of the cycle: every job holding an expired ``always`` lease is
    preempted (kind ``reclaim``). Non-preemptible jobs never hold leases."""
    out: list[Preemption] = []
    for r in sorted(snap.running, key=lambda r: r.request.id):
        if not r.request.preemptible:
            continue
        expired = [
            x for x in expired_leases(r, snap.now) if lease_policy(snap.pools, x) == "always"
        ]
        if not expired:
            continue
        x = min(expired, key=lambda x: (x.expires_at, x.id))
        out.append(
            Preemption(
                job_id=r.request.id,
                reason=Reason(ReasonCode.RECLAIMED,
                              f"reclaimed: {lease_text(x)} expired (reclaim: always)",
                              {"lease": x.id}),
                by_job=None,
                kind="reclaim",
            )
        )
    return out




def entitled(
    job: JobRequest,
    lease: LeaseInfo,
    pools: Mapping[str, PoolInfo],
    below: Collection[tuple[str, str]] | None = None,
) -> bool:
    """May ``job`` take back the capacity of this lease? Its pool is the lender,
    or is guaranteed the lease's GPU type and runs below that guarantee
    (``below``: such (pool, type) pairs; None = any pool with a guarantee)."""
    if job.pool == lease.lender:
        return True
    info = pools.get(job.pool)
    if info is None or info.guaranteed.get(lease.gpu_type, 0.0) <= EPS:
        return False
    return below is None or (job.pool, lease.gpu_type) in below


def pools_below_guarantee(snap: Snapshot) -> set[tuple[str, str]]:
    """(pool, type) pairs whose running jobs hold less than the guarantee."""
    used: dict[tuple[str, str], float] = {}
    for r in snap.running:
        for p in r.placements:
            if p.gpu_type:
                key = (r.request.pool, p.gpu_type)
                used[key] = used.get(key, 0.0) + p.units
    return {
        (name, t)
        for name, info in snap.pools.items()
        for t, g in info.guaranteed.items()
        if used.get((name, t), 0.0) + EPS < g
    }


def reclaimable_lease(
    victim: RunningJob,
    job: JobRequest,
    snap: Snapshot,
    below: Collection[tuple[str, str]] | None = None,
) -> LeaseInfo | None:
    """The expired lease of ``victim`` that ``job`` may reclaim, if any."""
    if not victim.request.preemptible or victim.request.id == job.id:
        return None
    for x in sorted(expired_leases(victim, snap.now), key=lambda x: (x.expires_at, x.id)):
        if lease_policy(snap.pools, x) == "always" or entitled(job, x, snap.pools, below):
            return x
    return None


def outlast_notes(
    job: JobRequest, grants_expiry: Mapping[str, float], now: float
) -> tuple[str, ...]:
    """Tell a borrowing job when its expected run outlasts its lease."""
    if job.duration_estimate_s is None or not grants_expiry:
        return ()
    lender, expires = min(grants_expiry.items(), key=lambda kv: (kv[1], kv[0]))
    if now + job.duration_estimate_s <= expires + EPS:
        return ()
    return (
        f"duration_estimate_s={job.duration_estimate_s:g} outlasts its lease from pool "
        f"{lender}, which expires after {expires - now:g} s; the job may be "
        "preempted then and requeued",
    )
