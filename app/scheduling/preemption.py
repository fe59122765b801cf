"""Victim selection: the cheapest set of running jobs whose removal lets a
pending job fit (pool quota and placement).

Rules (DESIGN.md §3 step 4), each enforced in :func:`candidates`:

- a victim is either a preemptible job of *lower* priority than the
  preemptor, or a borrower whose expired lease the preemptor may reclaim
  (see :mod:`app.scheduling.leases`); a non-preemptible job (P0) never is;
- victims are whole jobs, so a gang loses all its pods or none;
- the minimum run time protects fresh jobs from priority preemption, not
  from lease reclaim (the lender's bound must hold);
- thrash guard: a job preempted by X within ``thrash_window_s`` may not
  preempt X back.

:func:`find_victims` then picks lower tiers first (P2 before P1), cheapest
(fewest CU-seconds of lost work) first within a tier, takes the shortest
prefix that fits, and drops every victim that turns out unnecessary, so the
set is minimal: removing any one victim from it makes the job not fit. If
the job would not fit even with every candidate gone, nobody is preempted.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Literal

from app.scheduling.leases import reclaimable_lease
from app.scheduling.model import JobRequest, Preemption, ReplicaPlacement, RunningJob, Snapshot
from app.scheduling.pools import Charge, PoolLedger
from app.scheduling.quota import units_by_type
from app.scheduling.state import ClusterState

FitFn = Callable[[Sequence[RunningJob]], bool]
# Where a job would go on the state, leaving the state unchanged (None: no fit),
# the contract of placement.place_job.
PlaceFn = Callable[[JobRequest, ClusterState], "list[ReplicaPlacement] | None"]


@dataclass(frozen=True, slots=True)
class Candidate:
    job: RunningJob
    kind: Literal["preempt", "reclaim"]
    reason: str
    cost: float  # CU-seconds of work lost if stopped now

    @property
    def id(self) -> str:
        return self.job.request.id

    def sort_key(self) -> tuple[int, int, float, str]:
        return (
            self.job.request.priority_value,
            0 if self.kind == "reclaim" else 1,
            self.cost,
            self.id,
        )


def lost_work(r: RunningJob, now: float) -> float:
    return r.units * max(0.0, now - r.started_at)


def thrash_blocked(job: JobRequest, victim: RunningJob, now: float, window: float) -> bool:
    """True when ``victim`` preempted ``job`` recently (the pair would thrash)."""
    return (
        job.last_preempted_by == victim.request.id
        and job.last_preempted_at is not None
        and now - job.last_preempted_at < window
    )


def candidates(
    job: JobRequest,
    snap: Snapshot,
    running: Sequence[RunningJob],
    type_names: Collection[str] | None = None,
    exclude: Collection[str] = (),
) -> list[Candidate]:
    """Running jobs ``job`` may preempt, in the order they should be tried.

    ``type_names``: GPU types the job may use (None: any, e.g. CPU-only work),
    so jobs holding only other types are not considered."""
    out: list[Candidate] = []
    cfg = snap.config
    for r in running:
        req = r.request
        if req.id == job.id or req.id in exclude or not req.preemptible:
            continue
        if type_names is not None and not any(p.gpu_type in type_names for p in r.placements):
            continue
        lease = reclaimable_lease(r, job, snap)
        if lease is not None:
            out.append(
                Candidate(
                    r,
                    "reclaim",
                    f"lease {lease.id} ({lease.units:g} CU of {lease.gpu_type} from pool "
                    f"{lease.lender}) expired at t={lease.expires_at:g}; reclaimed for job "
                    f"{job.id} of pool {job.pool}",
                    lost_work(r, snap.now),
                )
            )
            continue
        if req.priority_value >= job.priority_value:
            continue
        if snap.now - r.started_at < cfg.min_run_time_s:
            continue
        if thrash_blocked(job, r, snap.now, cfg.thrash_window_s):
            continue
        out.append(
            Candidate(
                r,
                "preempt",
                f"preempted by job {job.id} ({job.priority} > {req.priority})",
                lost_work(r, snap.now),
            )
        )
    out.sort(key=Candidate.sort_key)
    return out


def find_victims(cands: Sequence[Candidate], fits: FitFn) -> list[Candidate] | None:
    """The minimal cheap victim set that makes ``fits`` true, or None.

    ``cands`` must be in preference order (see :func:`candidates`). Shortest
    fitting prefix by bisection, then drop unnecessary victims starting from
    the most valuable ones."""
    if fits([]):
        return []
    if not cands or not fits([c.job for c in cands]):
        return None
    lo, hi = 1, len(cands)
    while lo < hi:
        mid = (lo + hi) // 2
        if fits([c.job for c in cands[:mid]]):
            hi = mid
        else:
            lo = mid + 1
    chosen = list(cands[:lo])
    for c in reversed(list(chosen)):
        trial = [x for x in chosen if x is not c]
        if trial and fits([x.job for x in trial]):
            chosen = trial
    return chosen


def make_fits(
    job: JobRequest, state: ClusterState, ledger: PoolLedger, place: PlaceFn,
    may_borrow: bool = True,
) -> FitFn:
    """A what-if check: with the victims gone, does the job place and does its
    pool pay for it? Leaves state and ledger exactly as they were."""

    def fits(victims: Sequence[RunningJob]) -> bool:
        with (
            state.simulate_remove(victims),
            ledger.simulate_remove([v.request.id for v in victims]),
        ):
            placed = place(job, state)
            if placed is None:
                return False
            return isinstance(ledger.plan(job, units_by_type(placed), may_borrow), Charge)

    return fits


def to_preemptions(job: JobRequest, victims: Sequence[Candidate]) -> list[Preemption]:
    return [Preemption(job_id=v.id, reason=v.reason, by_job=job.id, kind=v.kind) for v in victims]
