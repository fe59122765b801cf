"""Fair-share preemption, only to restore entitlement.

Ordering by deficit (:mod:`app.scheduling.ordering`) decides who goes
*next*; it cannot help a team whose jobs find every card held by teams that
came earlier. So a waiting job may stop preemptible jobs of its *own*
priority, in its own pool, of another team, when all of these hold:

* **the preemptor's team stays within its entitlement**: what it holds
  with the job (in type-speed cards, the job's need counted on the slowest
  type it may use) is at most its entitlement
  (:mod:`app.scheduling.entitlements`);
* **the victim's team is still at or above its entitlement after the
  removal** -- of all the victims taken from it in this preemption together
  (Kueue's ``LessThanOrEqualToFinalShare`` idea, on entitlements): a team
  over its entitlement only because of this one job is not over it, so a
  big job that got the cards is not stopped by a stream of small ones, and
  a whole gang is never evicted for a small job when the gang's team would
  drop below its entitlement (its freed cards would stay idle or go back);
* **a job that started after waiting at least ``reservation_after_s``** (it
  held, or was owed, a reservation) is never a victim: the reservation is
  the wait bound;
* **cheap**: the victims of one preemption lose at most
  ``fair_preemption_max_lost_gpu_h`` GPU-hours of work in all (a restarted
  job starts over), so it is jobs that just started that make room.

Unlike before there is no per-type rule and no dominant-share rule: both
were proxies for "this team is below what it should have", which the
entitlement now says directly (it accounts for types, speeds and demand).
P0 is never a victim; the minimum run time and the thrash guard apply as to
every preemption (:mod:`app.scheduling.preemption`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from app.scheduling.entitlements import Entitlements, at_least, held_throughput, within
from app.scheduling.model import GpuType, JobRequest, RunningJob, Snapshot, gpus_held
from app.scheduling.quota import units_by_type

EPS = 1e-9


@dataclass(frozen=True, slots=True)
class FairShareRule:
    """The same-priority jobs one preemptor may stop, and how much work it may throw away."""

    allows: Callable[[RunningJob], bool]
    lost_gpu_s: Callable[[RunningJob], float]  # GPU-seconds a victim would lose
    budget_gpu_s: float = 0.0  # the victims' lost GPU-seconds at most (0: no limit)
    # the victims taken together leave each victim team at or above its entitlement
    together: Callable[[Sequence[RunningJob]], bool] | None = None

    def __call__(self, r: RunningJob) -> bool:
        return self.allows(r) and self.within_budget_one(r)

    def within_budget_one(self, r: RunningJob) -> bool:
        """``r`` alone loses no more than the budget (whoever the preemptor)."""
        return self.budget_gpu_s <= 0 or self.lost_gpu_s(r) <= self.budget_gpu_s + EPS

    def within_budget(self, victims: Sequence[RunningJob]) -> bool:
        """The fair-share victims of one preemption together stay within the budget and
        leave every victim team at or above its entitlement."""
        if self.together is not None and not self.together(victims):
            return False
        if self.budget_gpu_s <= 0:
            return True
        return sum(self.lost_gpu_s(r) for r in victims) <= self.budget_gpu_s + EPS


def fair_share_rule(
    job: JobRequest,
    snap: Snapshot,
    held: Callable[[str], float],
    entitled: Entitlements,
    need: float,
) -> FairShareRule | None:
    """The rule for ``job`` (module docstring), or None when no victim could pass it.

    ``held(team)``: what the team holds now (type-speed cards); ``need``: the job's
    need in the same unit.
    """
    cfg = snap.config
    team, pool = job.team, job.pool
    if not within(held(team) + need, entitled.of(team)):
        return None  # at or beyond its entitlement: the team waits, it does not take
    gpu_types: Mapping[str, GpuType] = snap.gpu_types
    now = snap.now
    reserved_wait = cfg.reservation_after_s

    def worth(r: RunningJob) -> float:
        return held_throughput(units_by_type(r.placements), gpu_types)

    def allows(r: RunningJob) -> bool:
        req = r.request
        if req.team == team or req.pool != pool:
            return False
        if r.started_at - req.submitted_at >= reserved_wait:
            return False  # started from a reservation: exempt (module docstring)
        return at_least(held(req.team) - worth(r), entitled.of(req.team))

    def together(victims: Sequence[RunningJob]) -> bool:
        by_team: dict[str, float] = {}
        for r in victims:
            by_team[r.request.team] = by_team.get(r.request.team, 0.0) + worth(r)
        return all(at_least(held(t) - w, entitled.of(t)) for t, w in by_team.items())

    def lost(r: RunningJob) -> float:
        return sum(gpus_held(p, gpu_types) for p in r.placements) * max(0.0, now - r.started_at)

    return FairShareRule(allows, lost, 3600.0 * cfg.fair_preemption_max_lost_gpu_h, together)
