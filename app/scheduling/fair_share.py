"""Fair-share preemption: which running jobs of its own priority a waiting job may stop.

Ordering by dominant share (:mod:`app.scheduling.ordering`) decides who goes
*next*; it cannot help a team whose jobs find every card held by teams that
came earlier and took more than their share. Kueue answers with fair
sharing preemption, and gpuq does the same, in two rules (Kueue's
``reclaimWithinCohort: Any`` and ``LessThanInitialShare``, from
kubernetes-sigs/kueue ``site/content/en/docs/concepts/preemption.md`` and
``keps/1714-fair-sharing``), checked per victim:

* **reclaim a type**: the preemptor's team, with the job admitted, stays
  within its fair share of a GPU type the victim holds, and the victim's
  team holds more than its own fair share of that type and, *without the
  victim*, still at least its fair share (Kueue's after-removal check: a
  team over its share only because of this one job is not over it; without
  the check a big job that got the cards was stopped by any small job of a
  team under its share, again and again). A team's fair share
  of a type is the type's CU times the team's weight over the weights of the
  teams with work in the cycle (running or pending) -- the nominal quota
  Kueue would be configured with, split evenly;
* **dominant share**: the preemptor's team, with the job, stays within its
  fair share of the whole cluster, and the victim's team holds more than
  its own and, without the victim, still more than the preemptor's team
  with the job; so the two can never preempt each other back and forth.

Unlike Kueue, preemption for fairness is made **cheap**: the victims of one
preemption may lose at most ``fair_preemption_max_lost_gpu_h`` GPU-hours of
work in all (a restarted job starts over), so it is jobs that just started
that make room and a long run is never thrown away for fairness. A job that
started after waiting at least ``reservation_after_s`` (so it held, or was
owed, a reservation) is never a fair-share victim: the reservation is the
wait bound, and a job it started must not be stopped by the stream that
blocked it (:mod:`app.scheduling.reservations`). Victims
are only of the preemptor's own pool (other pools are protected by their
guarantees and leases) and never non-preemptible (P0); the minimum run
time and the thrash guard apply as to every preemption
(:mod:`app.scheduling.preemption`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from app.scheduling.model import GpuType, JobRequest, RunningJob, Snapshot, gpus_held
from app.scheduling.quota import QuotaLedger, units_by_type

EPS = 1e-9


@dataclass(frozen=True, slots=True)
class FairLevels:
    """Per unit of team weight: the cluster's CU and each type's CU (built once a cycle)."""

    total: float
    by_type: Mapping[str, float]

    @classmethod
    def of(cls, snap: Snapshot, cards_by_type: Mapping[str, float]) -> FairLevels:
        active = {r.request.team for r in snap.running} | {j.team for j in snap.pending}
        weights = sum(_weight(snap, name) for name in active)
        if weights <= 0:
            return cls(0.0, {})
        by_type = {
            t: cards * gt.weight / weights
            for t, cards in cards_by_type.items()
            if (gt := snap.gpu_types.get(t)) is not None
        }
        return cls(sum(by_type.values()), by_type)


def _weight(snap: Snapshot, team: str) -> float:
    info = snap.teams.get(team)
    return info.weight if info is not None and info.weight > 0 else 1.0


@dataclass(frozen=True, slots=True)
class FairShareRule:
    """The same-priority jobs one preemptor may stop, and how much work it may throw away."""

    allows: Callable[[RunningJob], bool]
    lost_gpu_s: Callable[[RunningJob], float]  # GPU-seconds a victim would lose
    budget_gpu_s: float = 0.0  # the victims' lost GPU-seconds at most (0: no limit)

    def __call__(self, r: RunningJob) -> bool:
        return self.allows(r) and (
            self.budget_gpu_s <= 0 or self.lost_gpu_s(r) <= self.budget_gpu_s + EPS
        )

    def within_budget(self, victims: Sequence[RunningJob]) -> bool:
        """The fair-share victims of one preemption together stay within the budget."""
        if self.budget_gpu_s <= 0:
            return True
        return sum(self.lost_gpu_s(r) for r in victims) <= self.budget_gpu_s + EPS


def fair_share_rule(
    job: JobRequest,
    snap: Snapshot,
    ledger: QuotaLedger,
    levels: FairLevels,
    need_by_type: Mapping[str, float],
    need_min: float,
) -> FairShareRule | None:
    """The rule for ``job`` (module docstring), or None when no victim could pass it.

    ``need_by_type``: the CU the job would take on each type it may use;
    ``need_min``: the fewest CU any placement of it takes.
    """
    cfg = snap.config
    team, pool = job.team, job.pool
    w = _weight(snap, team)
    mine = ledger.share_with(team, need_min)
    overall = mine <= levels.total + EPS
    # types on which the team may reclaim its fair share
    reclaim = {
        t for t, need in need_by_type.items()
        if ledger.team_by_type[team][t] + need <= levels.by_type.get(t, 0.0) * w + EPS
    }
    if not overall and not reclaim:
        return None  # beyond its fair share everywhere: the team waits, it does not take
    teams = snap.teams
    gpu_types: Mapping[str, GpuType] = snap.gpu_types
    now = snap.now

    reserved_wait = cfg.reservation_after_s

    def above(other: str, t: str | None) -> bool:
        wo = teams[other].weight if other in teams and teams[other].weight > 0 else 1.0
        if t is None:
            return ledger.dominant_share(other) > levels.total + EPS
        return ledger.team_by_type[other][t] > levels.by_type.get(t, 0.0) * wo + EPS

    def still_at_share(other: str, t: str, units: float) -> bool:
        """``other``, without ``units`` CU of type ``t``, still holds its fair share of it."""
        wo = teams[other].weight if other in teams and teams[other].weight > 0 else 1.0
        return ledger.team_by_type[other][t] - units >= levels.by_type.get(t, 0.0) * wo - EPS

    def allows(r: RunningJob) -> bool:
        req = r.request
        if req.team == team or req.pool != pool:
            return False
        if r.started_at - req.submitted_at >= reserved_wait:
            return False  # started from a reservation: exempt (module docstring)
        held = units_by_type(r.placements)
        if reclaim and any(
            t in reclaim and above(req.team, t) and still_at_share(req.team, t, u)
            for t, u in held.items()
        ):
            return True
        return (overall and above(req.team, None)
                and ledger.share_with(req.team, -r.units) > mine + EPS)

    def lost(r: RunningJob) -> float:
        return sum(gpus_held(p, gpu_types) for p in r.placements) * max(0.0, now - r.started_at)

    return FairShareRule(allows, lost, 3600.0 * cfg.fair_preemption_max_lost_gpu_h)
