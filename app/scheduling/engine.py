"""One scheduling cycle, in numbered steps (Kueue style) so steps can be added.

1. Build: working state (copy-on-write nodes + capacity index), quota
   ledger, placement context (with the expected job mix), static capacity.
1b. Return leases: a borrowed charge that now fits in the borrower pool's
   own free guarantee moves there; the lease ends ``returned`` and the job
   keeps running (pool_steps.return_leases), so it is never reclaimed.
2. Reclaim expired leases: holders of an expired ``reclaim: always``
   lease are preempted (pool_steps.reclaim_expired).
1c. Entitlements and deficits: the weighted max-min allocation over
   effective throughput (entitlements.py) and each team's time-integrated
   deficit, advanced from ``Snapshot.fair`` to now and returned in
   ``CycleResult.fair`` (deficit.py).
3. Order: priority, pools below guarantee, team key (held less credit, per
   unit of entitlement), age (ordering.FairOrder, re-read after every
   admission); within a team promoted jobs first, then shortest predicted.
3b. Reservation slots: the cycle's ``max_reservations`` go first to the jobs
   at the hard cap (the oldest of each request shape, oldest first), whatever
   their place in the order; promoted jobs get the rest (``Cycle.capped_first``).
3c. Before the order, each job with such a slot whose capacity is planned (every
   running job on the GPU types it may use has a duration estimate it has not run
   past) is admitted if it fits, else gets its reservation then, so no job ahead of
   it in the order takes the capacity it waits for as that frees
   (``Cycle.capped_before_order``); the others are admitted or reserved for at their
   turn, as before.
4. Admit each job in order: a loop over the gates of
   :mod:`app.scheduling.gates` (never fits -> cordoned -> admission cap ->
   team quota -> placement -> pool charge); a ``Preempt`` verdict from any of
   them goes to the one preemptor (:meth:`Cycle.try_preempt`,
   preemption.py; same-priority victims only to restore entitlement:
   fair_share.py); a job that does not fit gets a reservation when it is
   owed one (promoted and its team owed it, or at the hard cap
   ``reservation_after_s``); others behind it may backfill. Every change to the cluster
   state and the two ledgers goes through the books (books.py).
5. Explain: every job left pending has a reason (filled in step 4).

Speed: answers are remembered in one memo keyed by the job signature
(gates.py): a shape that failed for capacity stays failed for the rest of
the cycle (the state only fills up within a cycle, unless something is
released, which bumps ``state.release_epoch``), so a backlog of 100,000
unschedulable jobs costs a few dict lookups each.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from operator import attrgetter

from app.scheduling.books import Books, Statement, holding
from app.scheduling.context import PlacementContext
from app.scheduling.deficit import advance, team_key
from app.scheduling.entitlements import (
    Classifier,
    entitlements,
    held_throughput,
    job_cards,
    within,
)
from app.scheduling.fair_share import FairShareRule, fair_share_rule
from app.scheduling.filters import allowed_type_names, allowed_types
from app.scheduling.gates import GATES, Gate, Memo, Placement, job_signature
from app.scheduling.leases import is_expired, pools_below_guarantee
from app.scheduling.model import (
    Admission,
    CycleResult,
    JobRequest,
    Preemption,
    RunningJob,
    Snapshot,
)
from app.scheduling.modes import mode_of
from app.scheduling.ordering import PROMOTE, FairOrder, in_age_order
from app.scheduling.placement import place_job, try_place
from app.scheduling.pool_steps import (
    charge,
    choose_victims,
    may_preempt_anyone,
    preempt_for,
    reclaim_expired,
    return_leases,
    why_no_room,
)
from app.scheduling.pools import PoolLedger
from app.scheduling.preemption import VictimPool
from app.scheduling.quota import QuotaLedger, units_by_type
from app.scheduling.reasons import (
    StaticCapacity,
    capacity_reason,
    foreign_cards_note,
)
from app.scheduling.reservations import add_holds, reserve_for
from app.scheduling.state import ClusterState
from app.scheduling.verdicts import FIT, Fit, NoFit, Reason, ReasonCode, code_of

EPS = 1e-9
# The jobs at the hard cap (pending at least ``reservation_after_s``) whose admission gates
# the reservation-slot pass asks in a cycle, at most (:meth:`Cycle.capped_first`)
CAPPED_LOOKS = 64


class Cycle:
    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.result = CycleResult()

    # -- step 1 -------------------------------------------------------------
    def build(self) -> None:
        snap = self.snap
        self.state = ClusterState.from_snapshot(snap)
        self.ledger = QuotaLedger.from_snapshot(snap)
        # 1c: entitlements and deficits (the held throughput of the interval since the
        # last cycle is what runs now)
        self.classify = Classifier(snap.gpu_types, snap.pools)
        self.entitled = entitlements(snap, self.classify)
        cfg = snap.config
        held = {t: self.held(t) for t in self.entitled.throughput}
        self.fair = advance(snap.fair, snap.now, self.entitled.throughput, held,
                            cfg.fair_horizon_s)
        self.result.fair = self.fair
        self._owed: dict[str, tuple[int, float, float, float]] = {}
        self.ctx = PlacementContext.from_snapshot(snap)
        self.static = static_capacity(snap)
        # the schedulable part, only when some node is cordoned or not ready
        self.ready = (
            StaticCapacity.of(snap.nodes, schedulable_only=True)
            if self.static.unschedulable else None
        )
        self.memo = Memo()  # the cycle's one memo, keyed by job signature (gates.py)
        self.reservations = 0
        # jobs at the hard cap given a reservation slot before the order (capped_first);
        # max_reservations then counts the slots left for promoted jobs
        self.capped_slots: set[str] = set()
        self.capped_jobs: list[JobRequest] = []  # their jobs, oldest first
        # GPU types (None: any) on which a running job has no duration estimate or ran
        # past it, read once a cycle when a job holds a slot (capped_before_order)
        self.unplanned: set[str | None] | None = None
        self.max_reservations = snap.config.max_reservations
        self.admitted = 0
        self.max_admissions = snap.config.max_cycle_admissions
        self.capped_teams = {
            name for name, t in snap.teams.items()
            if t.quota_units is not None or t.quota_by_type
        }
        self.now = snap.now
        self.reserve_after = snap.config.reservation_after_s
        self.reserve_before = snap.now - snap.config.reservation_after_s
        # pools, leases, preemption
        self.pools = PoolLedger.from_snapshot(snap)
        self.books = Books(self.state, self.ledger, self.pools)
        # the gates in their order, less those that let every job of this cycle through
        self.gates = tuple(g for g in GATES if g.applies(self))
        self.placement_gate = next(g for g in GATES if isinstance(g, Placement))
        # the leading gates whose answers hold for the cycle, and the ones after them
        lead = 0
        while lead < len(self.gates) and self.gates[lead].for_cycle:
            lead += 1
        self.last_cycle_gate = self.gates[lead - 1] if lead else None
        self.later_gates = self.gates[lead:]
        # a signature the leading gates let through goes straight to placement: a
        # remembered placement failure is then answered without the gate loop (admit)
        self.placement_next = bool(self.later_gates) and self.later_gates[0] is (
            self.placement_gate)
        # hold classes by estimated run time, valid while the holds are unchanged
        self._hold_classes: dict[float, int] = {}
        self.gone: set[str] = set()  # running jobs stopped this cycle
        preemptible = [r.request.priority_value for r in snap.running if r.request.preemptible]
        self.lowest_victim = min(preemptible, default=10**9)
        # per capped team, its lowest preemptible priority running: a job of the team
        # at its quota may preempt the team's own lower-priority work (Kueue's
        # withinClusterQueue: LowerPriority)
        self.team_lowest_victim: dict[str, int] = {}
        for r in snap.running:
            t = r.request.team
            if r.request.preemptible and t in self.capped_teams:
                v = r.request.priority_value
                self.team_lowest_victim[t] = min(self.team_lowest_victim.get(t, v), v)
        self.any_lease = any(  # only an expired lease can be reclaimed
            is_expired(x, snap.now) for r in snap.running if r.request.preemptible
            for x in r.leases
        )
        self.victim_pool: VictimPool | None = None  # built at the first preemption
        # fair-share victims possible at all: the cheap same-priority jobs per priority,
        # and per (team, pool, priority, ledger version, stops) whether any passes
        self.fair_cheap: dict[int, list[RunningJob]] = {}
        self.fair_memo: dict[tuple, bool] = {}
        # who could be a fair-share victim at all: teams by (pool, priority) of preemptible
        # running jobs, so a cycle with none (one team, or a P0 backlog) pays nothing for it
        self.fair_victim_teams: dict[tuple[str, int], set[str]] = {}
        for r in snap.running:
            if r.request.preemptible:
                key = (r.request.pool, r.request.priority_value)
                self.fair_victim_teams.setdefault(key, set()).add(r.request.team)

    # -- entitlement, credit and what a team is owed ----------------------------
    def held(self, team: str) -> float:
        """What ``team`` holds now, in the entitlement's unit (type-speed cards)."""
        return held_throughput(self.ledger.team_by_type[team], self.snap.gpu_types)

    def team_key(self, team: str) -> tuple[float, float]:
        """The team's place in the order (lower first): :func:`deficit.team_key`."""
        return team_key(self.fair.deficit.get(team, 0.0), self.entitled.of(team),
                        self.held(team), self.snap.config.fair_horizon_s)

    def owed(self, job: JobRequest) -> bool:
        """Is ``job``'s team owed it: would the team with it stay within its entitlement,
        or has it been short of its entitlement by at least the job's own work (or by
        half of what the horizon can hold)?"""
        team = job.team
        v = self.ledger.version
        got = self._owed.get(team)
        if got is None or got[0] != v:
            got = (v, self.held(team), self.entitled.of(team),
                   self.fair.deficit.get(team, 0.0))
            self._owed[team] = got
        _, held, ent, credit = got
        if ent <= EPS:
            return False
        need = job_cards(job) * self._speed(job)
        if within(held + need, ent):
            return True
        cfg = self.snap.config
        est = job.expected_s
        run = est if est is not None else cfg.unknown_duration_s
        return credit >= min(need * run, 0.5 * ent * cfg.fair_horizon_s) - EPS

    def _speed(self, job: JobRequest) -> float:
        """The job's speed on the slowest type it may use (its need counted low, so a
        team is never refused what it is owed for its cards being fast)."""
        names = self.classify(job)[0]
        types = self.snap.gpu_types
        return min((types[t].speed for t in names if t in types), default=1.0)

    def may_reserve(self, job: JobRequest) -> bool:
        """A reservation for a job that does not fit: at the hard cap, or -- for a job with
        a prediction (its estimate, or its team's history) -- promoted within its team
        (ordering.promoted) while its team is owed it. A job without one waits for the
        cap: held capacity may only be backfilled by jobs with a prediction, so holding it
        early for a job of unknown length kept the short jobs of every team out."""
        sub = job.submitted_at
        if sub <= self.reserve_before:
            return True
        est = job.duration_estimate_s  # JobRequest.expected_s, inlined (as below)
        if est is None:
            est = job.predicted_s
            if est is None:
                return False
        # ordering.promoted(), inlined (this runs for every job a backlog passes over):
        # requeued, or waited PROMOTE x its prediction or the cap
        if not job.preemption_count:
            wait_for = PROMOTE * est
            cap = self.reserve_after
            if cap < wait_for:
                wait_for = cap
            if self.now - sub < wait_for:
                return False
        return self.owed(job)

    # -- for the descheduler: admissions outside the queue's order -------------
    def admission(self, job: JobRequest) -> Admission | None:
        """How ``job`` would be admitted as things stand (placement, team quota and
        pool charge), or None; nothing is reserved."""
        placed = place_job(job, self.state, self.ctx)
        if placed is None or self.ledger.check(job, units_by_type(placed)) is not None:
            return None
        adm = charge(job, placed, self.pools, self.snap)
        return adm if isinstance(adm, Admission) else None

    def statement(self) -> Statement:
        """Tentative changes to the cycle's books (commit or discard)."""
        return self.books.statement()

    def stopped(self, job_ids: Iterable[str]) -> None:
        """Running jobs the caller stopped through a statement: no longer victims."""
        self.gone.update(job_ids)

    # -- step 1b ------------------------------------------------------------
    def return_leases(self) -> None:
        """Leases whose charge now fits the borrower's own guarantee end
        ``returned`` before anything is reclaimed (the job keeps running)."""
        self.snap, returned = return_leases(self.snap, self.pools)
        if returned:
            self.result.returned.extend(returned)
            self.any_lease = any(
                is_expired(x, self.snap.now) for r in self.snap.running
                if r.request.preemptible for x in r.leases
            )

    # -- step 2 -------------------------------------------------------------
    def reclaim_leases(self) -> list[Preemption]:
        """Expired ``always`` leases: their holders stop, capacity is freed."""
        if not self.any_lease:  # no preemptible job holds an expired lease
            return []
        out = reclaim_expired(self.snap, self.books)
        self.gone.update(p.job_id for p in out)
        return out

    # -- step 3 -------------------------------------------------------------
    def order(self, aged: list[JobRequest] | None = None) -> FairOrder:
        """The fair order (``aged``: the pending jobs already in age order, if known)."""
        cfg = self.snap.config
        return FairOrder(self.snap.pending if aged is None else aged, self.ledger,
                         self.snap.now, self.team_key, cfg.shortest_first,
                         cfg.unknown_duration_s, cfg.reservation_after_s, aged=aged is not None)

    # -- step 4 -------------------------------------------------------------
    def admit(self, job: JobRequest, sig: int | None = None) -> None:
        """Ask the gates in order (:data:`app.scheduling.gates.GATES`); the first that
        does not let the job through decides: it waits, never runs, or the preemptor
        tries to make room. Gates whose answer holds for the whole cycle
        (``Gate.for_cycle``) are not asked again for a signature they let through.
        ``sig``: the job's signature number (:meth:`Memo.number`), when the caller has it."""
        memo = self.memo
        if sig is None:
            sig = memo.number(job)
        gates = self.later_gates if sig in memo.passed else self.gates
        fit = FIT
        for gate in gates:
            v = gate.check(self, job, sig, fit)
            if v is FIT:
                if gate is self.last_cycle_gate:
                    memo.passed.add(sig)
                continue
            kind = type(v)
            if kind is Fit:
                fit = v  # type: ignore[assignment]
                continue
            if kind is NoFit:
                why: Reason = v.reason  # type: ignore[union-attr,assignment]
                if gate is self.placement_gate:  # the common wait: inline (a backlog's)
                    self.result.reasons[job.id] = why
                    self._maybe_reserve(job, sig)  # asks may_reserve first
                    return
                self._wait(job, gate, why)
                return
            if self.try_preempt(job, sig):  # Preempt: the one preemptor
                return
            reason = v.reason  # type: ignore[union-attr]
            if reason is None:  # placement: explained only now
                reason = self.explain_no_room(job, sig)
            elif reason.code is not ReasonCode.TEAM_QUOTA:
                reason = self._protected_note(job, reason)
            self._wait(job, gate, reason)
            return
        adm = fit.admission
        assert adm is not None  # the last gate's Fit carries the admission
        self.books.reserve(holding(job, adm, self.snap.now))
        self.admitted += 1
        self.result.admissions.append(adm)

    def _wait(self, job: JobRequest, gate: Gate, reason: Reason) -> None:
        if reason.code is ReasonCode.NEVER_FITS:
            self.result.unschedulable[job.id] = reason
            return
        self.result.reasons[job.id] = reason
        if gate is self.placement_gate and self.may_reserve(job):
            self._maybe_reserve(job)

    def failure_context(self, job: JobRequest) -> tuple:
        """What a remembered placement failure depends on beside the job signature: the
        preemption search that followed it (priority, team) and the reservations."""
        return (job.priority_value, job.team, self.hold_class(job) if self.ctx.holds else 0)

    def explain_no_room(self, job: JobRequest, sig: int) -> Reason:
        """Why nothing fits (whose reservations stand in the way, else the capacity),
        remembered for the signature until something is released."""
        reason = self._held_reason(job) or foreign_cards_note(
            capacity_reason(job, self.state.index, self.ctx), job, self.static, self.ctx)
        reason = self._protected_note(job, reason)
        self.memo.put("placement", sig, NoFit(reason), self.failure_context(job),
                      self.state.release_epoch)
        return reason

    def fair_rule(self, job: JobRequest) -> FairShareRule | None:
        """Fair-share preemption for ``job`` (``fair_preemption``; the rule is in
        :mod:`app.scheduling.fair_share`), or None when no same-priority job may be
        its victim."""
        if not self.snap.config.fair_preemption or job.priority_value < self.lowest_victim:
            return None
        teams = self.fair_victim_teams.get((job.pool, job.priority_value))
        if not teams or teams <= {job.team}:
            return None  # no same-priority job of another team in the pool to stop
        return fair_share_rule(job, self.snap, self.held, self.entitled,
                               job_cards(job) * self._speed(job))

    def _fair_possible(self, job: JobRequest, fair: FairShareRule) -> bool:
        """Could any running job pass ``fair`` at all? Only jobs of the job's priority past
        the minimum run time and within the lost-work budget can (few: the jobs that just
        started), so a backlog that cannot fit pays no victim search for fairness."""
        prio = job.priority_value
        cheap = self.fair_cheap.get(prio)
        if cheap is None:
            min_start = self.snap.now - self.snap.config.min_run_time_s
            cheap = self.fair_cheap[prio] = [
                r for r in self.snap.running
                if r.request.preemptible and r.request.priority_value == prio
                and r.started_at <= min_start and fair.within_budget_one(r)
            ]
        if not cheap:
            return False
        key = (job.team, job.pool, prio, self.ledger.version, len(self.gone))
        got = self.fair_memo.get(key)
        if got is None:
            got = self.fair_memo[key] = any(
                r.request.id not in self.gone and fair.allows(r) for r in cheap
            )
        return got

    def try_preempt(self, job: JobRequest, sig: int | None = None) -> bool:
        """The one preemptor (a gate's ``Preempt``, or the descheduler's P0 room): stop
        the cheapest minimal set of victims and admit ``job`` instead."""
        fair = self.fair_rule(job)
        if fair is not None and not self._fair_possible(job, fair):
            fair = None
        if fair is None and not may_preempt_anyone(
            job, self.snap, self.lowest_victim, self.any_lease
        ):
            return False
        # the team matters to fair share and to the team quota the what-if checks
        by_team = fair is not None or job.team in self.capped_teams
        if sig is None:
            sig = self.memo.number(job)
        context = (job.priority_value, job.team if by_team else "")
        epoch = self.state.release_epoch
        if self.memo.get("preempt", sig, context, epoch):
            return False
        ctx = self.ctx
        names = (
            {t.name for t in allowed_types(job, ctx.gpu_types, ctx.pools)}
            if mode_of(job).needs_gpu(job) else None
        )

        def place(j: JobRequest, st: ClusterState):
            return place_job(j, st, ctx)

        def team_ok(placements) -> bool:
            return self.ledger.check(job, units_by_type(placements)) is None

        if self.victim_pool is None:
            self.victim_pool = VictimPool(
                self.snap.running, self.snap.now, pools_below_guarantee(self.snap)
            )
        done = preempt_for(
            job, self.snap, self.books, place, self.gone, names, team_ok, self.victim_pool,
            fair,
        )
        if done is None:
            self.memo.put("preempt", sig, True, context, self.state.release_epoch)
            return False
        preemptions, adm = done
        self.admitted += 1
        self.result.preemptions.extend(preemptions)
        self.result.admissions.append(adm)
        return True

    def may_preempt_own(self, job: JobRequest, why: Reason) -> bool:
        """A job its team's quota holds back may preempt the team's own lower-priority
        work (not when it needs more than the whole quota)."""
        lowest = self.team_lowest_victim.get(job.team)
        return (lowest is not None and job.priority_value > lowest
                and not why.fields.get("above_quota"))

    def _protected_note(self, job: JobRequest, reason: Reason) -> Reason:
        """After a failed victim search: ``reason`` with what the minimum run time changes.

        Lower-priority jobs the minimum run time still protects are named only with the
        preemptor's own verdict at the time their protection ends (the real rules on the
        cycle's state, :func:`pool_steps.choose_victims` with the clock moved on): "job(s)
        X may be preempted for it in N s" only when that what-if stops X, and then the
        reason carries ``start_in_s``. When no victim set would make room even once every
        protection has ended (a non-preemptible job its pool cannot pay for, the rest held
        by jobs it may not preempt), the reason says so and how to fix it, instead of
        promising a preemption the rules never make."""
        vp = self.victim_pool
        if vp is None or job.priority_value <= self.lowest_victim:
            return reason
        ctx = self.ctx
        names = (
            {t.name for t in allowed_types(job, ctx.gpu_types, ctx.pools)}
            if mode_of(job).needs_gpu(job) else None
        )
        snap = self.snap
        cfg = snap.config
        fresh = vp.protected(job, names, snap.now, cfg.min_run_time_s, self.gone)
        if fresh is None:
            return reason
        sig = self.memo.number(job)
        context = (job.priority_value, job.team, job.last_preempted_by, len(self.gone))
        epoch = self.state.release_epoch
        got = self.memo.get("protected", sig, context, epoch)
        if got is None:
            got = self.memo.put("protected", sig, self._protection_verdict(job, names, fresh),
                                context, epoch)
        note, fields = got
        return reason.extend(note, **fields)

    def _protection_verdict(
        self, job: JobRequest, names: set[str] | None, fresh: list[RunningJob],
    ) -> tuple[str, dict]:
        """(the note, its fields) for :meth:`_protected_note`: the earliest protection end
        at which the preemptor would stop someone for ``job`` (a later end only adds
        victims, so a binary search over the ends), or why it never would."""
        snap = self.snap
        cfg = snap.config
        min_run = cfg.min_run_time_s
        ids = ", ".join(sorted(r.request.id for r in fresh)[:3])
        ends = sorted({r.started_at + min_run for r in fresh})
        fair = self.fair_rule(job)

        def place(j: JobRequest, st: ClusterState):
            return place_job(j, st, self.ctx)

        def team_ok(placements) -> bool:
            return self.ledger.check(job, units_by_type(placements)) is None

        def victims_at(t: float):
            later = replace(snap, now=t)
            return choose_victims(job, later, self.books, place, self.gone, names, team_ok,
                                  None, fair)

        found = victims_at(ends[-1])
        if found is None:
            why = why_no_room(job, snap, self.books, place, [
                r for r in snap.running
                if r.request.preemptible and r.request.priority_value < job.priority_value
                and r.request.id not in self.gone
                and (names is None or any(p.gpu_type in names for p in r.placements))
            ], team_ok)
            return (
                f"; lower-priority job(s) {ids} ran less than min_run_time_s "
                f"({min_run:g} s), but no preemption will make room for it: {why}"
                f"{self._no_room_fix(job, why)}",
                {"no_preemption": True},
            )
        lo, hi = 0, len(ends) - 1
        while lo < hi:  # the earliest end at which the what-if finds victims
            mid = (lo + hi) // 2
            got = victims_at(ends[mid])
            if got is None:
                lo = mid + 1
            else:
                hi, found = mid, got
        wait = max(0.0, ends[lo] - snap.now)
        who = ", ".join(sorted(v.id for v in found)[:3])
        return (
            f"; lower-priority job(s) {who} ran less than min_run_time_s "
            f"({min_run:g} s): may be preempted for it in {wait:.0f} s",
            {"start_in_s": wait, "victims": tuple(sorted(v.id for v in found))},
        )

    def _no_room_fix(self, job: JobRequest, why: str) -> str:
        """How to run a job no preemption will make room for, when a setting can: a
        non-preemptible job stopped by its pool's budget may be submitted preemptible
        (it may then borrow) or its pool given more guarantee."""
        if job.preemptible or ReasonCode.POOL_QUOTA is not getattr(why, "code", None):
            return ""
        gpu_type = why.fields.get("gpu_type")  # type: ignore[attr-defined]
        lower = sorted((p for p in self.snap.priorities.values() if p.preemptible),
                       key=lambda p: -p.value)
        as_ = f"as {lower[0].name}" if lower else "with a preemptible priority"
        return (
            f"; to run it, submit it {as_} (a preemptible job may borrow other pools' idle "
            f"guarantee) or ask an admin to raise pool {job.pool}'s guarantee"
            + (f" of {gpu_type}" if gpu_type else "")
        )

    def quota_precheck(self, job: JobRequest, sig: int) -> Reason | None:
        """Reject without placing when even the cheapest option breaks the team's total quota."""
        room = self.ledger.headroom(job.team)
        if room is None:
            return None
        least = self.memo.get("min_units", sig)
        if least is None:
            least = self.memo.put("min_units", sig, min_units(job, self.ctx))
        if least > room + EPS:
            info = self.ledger.teams[job.team]
            used = self.ledger.team_total[job.team]
            fields = {"team": job.team, "used": used, "quota": info.quota_units,
                      "need": least}
            if info.quota_units is not None and least > info.quota_units + EPS:
                return Reason(
                    ReasonCode.TEAM_QUOTA,
                    f"job needs at least {least:g} CU but team {job.team}'s quota is "
                    f"{info.quota_units:g} CU: it runs only if the quota is raised",
                    {**fields, "above_quota": True},
                )
            return Reason(
                ReasonCode.TEAM_QUOTA,
                f"team {job.team} at quota {used:g}/{info.quota_units:g} CU "
                f"(job needs at least {least:g} CU)",
                fields,
            )
        return None

    def _held_reason(self, job: JobRequest) -> Reason | None:
        """If only reservations stand in the way, say whose and how to backfill."""
        holds = self.ctx.holds
        if not holds:
            return None
        self.ctx.holds = {}
        try:
            fits = try_place(job, self.state, self.ctx) is not None
        finally:
            self.ctx.holds = holds
        if not fits:
            return None
        first = min(holds.values(), key=lambda h: h.start)
        wait = max(0.0, first.start - self.snap.now)
        owners = sorted({h.job_id for h in holds.values()})
        return Reason(
            ReasonCode.RESERVED,
            f"free capacity is held for job(s) {', '.join(owners[:3])} (reservation, expected "
            f"start in {wait:.0f}s); a job whose duration_estimate_s (or predicted run "
            "time) ends before then may use it",
            {"holders": tuple(owners), "start_in_s": wait},
        )

    def hold_class(self, job: JobRequest) -> int:
        """How many of the cycle's holds the job's expected end precedes."""
        d = job.expected_s
        if d is None:
            return 0
        got = self._hold_classes.get(d)
        if got is None:
            end = self.snap.now + d
            got = self._hold_classes[d] = sum(
                1 for h in self.ctx.holds.values() if end <= h.start + EPS
            )
        return got

    def _maybe_reserve(self, job: JobRequest, sig: int | None = None) -> None:
        if job.id in self.capped_slots:  # a slot of its own (3b)
            self.capped_slots.discard(job.id)  # one reservation a cycle
            self._reserve(job, self.memo.number(job) if sig is None else sig)
            return
        if self.reservations >= self.max_reservations or not self.may_reserve(job):
            return
        if sig is None:
            sig = self.memo.number(job)
        self._reserve(job, sig)

    def _reserve(self, job: JobRequest, sig: int) -> None:
        epoch = self.state.release_epoch
        if self.memo.get("no_reservation", sig, (), epoch):
            return  # this signature could not be given a reservation this cycle
        r = reserve_for(job, self.state, self.ctx, self.snap.running)
        if r is None:
            self.memo.put("no_reservation", sig, True, (), epoch)
            return
        self.reservations += 1
        add_holds(self.ctx, r)
        self._hold_classes.clear()  # the holds changed
        wait = max(0.0, r.start - self.snap.now)
        before = self.result.reasons.get(job.id)
        self.result.reasons[job.id] = Reason(
            ReasonCode.RESERVATION,
            (
                f"waiting for reservation: capacity held on {len(r.holds)} node(s) "
                f"({', '.join(sorted(r.holds)[:4])}), expected start in {wait:.0f}s; "
                f"{before or ''}"
            ).rstrip("; "),
            {"nodes": tuple(sorted(r.holds)), "start_in_s": wait,
             "meanwhile": code_of(before)},
        )

    # -- step 3b ------------------------------------------------------------
    def capped_first(self, aged: list[JobRequest]) -> None:
        """The cycle's reservation slots (``max_reservations``) go first to the jobs at the
        hard cap: to the oldest capped job of each request shape (job signature), shapes in
        the order of their oldest capped job; promoted jobs get the slots left, in the fair
        order (:meth:`_maybe_reserve`). Only who gets a slot is decided here; the slot
        holders are then admitted, or reserved for, before the order on planned capacity
        (:meth:`capped_before_order`), the others at their turn. One slot per shape: a
        younger job of the shape would hold capacity behind the older one's anyway, and
        older capped jobs of one shape (a backlog of identical jobs on other cards) no
        longer keep every other shape from a slot.

        ``aged``: the pending jobs in age order, so the capped ones are its prefix. A slot
        goes to a job of the highest pending priority that the gates before placement let
        through (one blocked by its team's quota or that never fits is not owed capacity).
        Cost: the capped jobs are read oldest first until the slots are filled -- a job
        whose shape has a slot costs one signature -- and the gates are asked for at most
        ``CAPPED_LOOKS`` jobs; the reservations a cycle makes stay at ``max_reservations``.
        """
        rb = self.reserve_before
        k = self.max_reservations
        if not aged or aged[0].submitted_at > rb or k <= 0:
            return
        top = max(map(attrgetter("priority_value"), self.snap.pending))
        lead = self.gates[:self.gates.index(self.placement_gate)]
        shapes: set[tuple] = set()
        slots = self.capped_slots
        asked = 0
        for job in aged:
            if job.submitted_at > rb or len(slots) >= k or asked >= CAPPED_LOOKS:
                break
            if job.priority_value < top:
                continue
            shape = job_signature(job)
            if shape in shapes:  # an older job of its shape has the slot
                continue
            asked += 1
            sig = self.memo.number(job)
            if all(g.check(self, job, sig, FIT) is FIT for g in lead):
                slots.add(job.id)
                shapes.add(shape)
                self.capped_jobs.append(job)
        self.max_reservations = k - len(self.capped_slots)

    # -- step 3c ------------------------------------------------------------
    def planned(self, job: JobRequest) -> bool:
        """Is the capacity ``job`` may use planned: does every running job on the GPU types
        it may use (every running job, for a job without GPUs) have a duration estimate
        that it has not run past? Then the ends its reservation waits for are known times,
        the declared limits the wait bound's ``W`` counts on (docs/scheduling.md)."""
        bad = self.unplanned
        if bad is None:
            bad = self.unplanned = set()
            now = self.snap.now
            gone = self.gone
            every = len(self.snap.gpu_types) + 1  # each type, and None
            for r in self.snap.running:
                d = r.request.duration_estimate_s
                if (d is None or r.started_at + d <= now) and r.request.id not in gone:
                    bad.add(None)
                    bad.update(p.gpu_type for p in r.placements)
                    if len(bad) >= every:
                        break  # nothing is planned
        if not bad:
            return True
        if not mode_of(job).needs_gpu(job):
            return None not in bad
        return bad.isdisjoint(allowed_type_names(job, self.ctx.gpu_types, self.ctx.pools))

    def capped_before_order(self) -> set[str]:
        """The slot holders of :meth:`capped_first`, oldest first, before the fair order:
        each whose capacity is :meth:`planned` is admitted if it fits, else gets its
        reservation now, so the capacity it waits for is held from the moment it frees,
        and no job ahead of it in the order takes it unless that job is expected to end
        before its start. Returns the ids of the jobs so treated (they are not looked at
        again at their turn); the other slot holders are admitted or reserved for at
        their turn, as before.

        Only on planned capacity: a running job past its expected run is read as ending
        "now" in every cycle, so cards held for a start that waits for it stay idle while
        it runs on, and predictions are often passed (Philly's windows have no estimates:
        reservations made before the order there cost +1.35 points of mean JCT on the
        tuning windows; admitting the capped jobs that fit before the order, alone, gained
        on the tuning windows and lost on the evaluation windows: docs/evaluation.md).
        Cost, in a cycle with a slot holder: one pass over the running jobs, and the slot
        holders' admissions moved before the order (no reservation more)."""
        done: set[str] = set()
        if not self.capped_jobs:
            return done
        order = self.result.order
        for job in self.capped_jobs:
            if self.planned(job):
                order.append(job.id)
                self.admit(job)
                done.add(job.id)
                if job.duration_estimate_s is None and self.unplanned is not None:
                    # if it started, what it runs on is no longer planned
                    self.unplanned.add(None)
                    self.unplanned.update(
                        allowed_type_names(job, self.ctx.gpu_types, self.ctx.pools))
        return done

    # -- the cycle ----------------------------------------------------------
    def run(self) -> CycleResult:
        self.build()  # 1
        self.return_leases()  # 1b
        self.result.preemptions.extend(self.reclaim_leases())  # 2
        aged = in_age_order(self.snap.pending)
        self.capped_first(aged)  # 3b
        done = self.capped_before_order()  # 3c
        ordered = self.order(aged)  # 3
        self.admit_in_order(
            (j for j in ordered if j.id not in done) if done else ordered
        )  # 4 (5: reasons are written as jobs are passed over)
        return self.result

    def admit_in_order(self, jobs: Iterable[JobRequest]) -> None:
        """Step 4 for ``jobs`` in the fair order: :meth:`admit` each, except the common
        wait of a backlog -- a job whose signature the leading gates let through and whose
        placement failure the memo holds -- answered here as the Placement gate would
        answer it from the memo (:meth:`Placement.check`, then :meth:`admit`'s NoFit
        branch), without the gate loop: a backlog of 100,000 jobs that cannot fit costs a
        signature, two lookups and a reason each."""
        order = self.result.order
        reasons = self.result.reasons
        admit = self.admit
        if not self.placement_next:
            for job in jobs:
                order.append(job.id)
                admit(job)
            return
        memo = self.memo
        numbers, passed, entries = memo.numbers, memo.passed, memo.entries
        state, ctx, slots = self.state, self.ctx, self.capped_slots
        hold_class, maybe_reserve = self.hold_class, self._maybe_reserve
        for job in jobs:
            order.append(job.id)
            sig = numbers.get(job_signature(job))  # Memo.number, inlined: once per job
            if sig is not None and sig in passed:
                got = entries.get((  # Cycle.failure_context, inlined
                    "placement", sig,
                    (job.priority_value, job.team, hold_class(job) if ctx.holds else 0),
                ))
                if got is not None and got[0] == state.release_epoch:
                    reasons[job.id] = got[1].reason
                    # _maybe_reserve's own first tests, before its call
                    if job.id in slots or self.reservations < self.max_reservations:
                        maybe_reserve(job, sig)
                    continue
            admit(job, sig)  # the signature's number, when it has one already


def min_units(job: JobRequest, ctx: PlacementContext) -> float:
    """The fewest CU any admissible placement of ``job`` could be charged."""
    mode = mode_of(job)
    units = mode.units_total(job)
    if units is not None:
        return units
    opts = mode.options(job, allowed_types(job, ctx.gpu_types, ctx.pools))
    if not opts:
        return 0.0
    return min(d.units for d in opts) * job.min_available


def static_capacity(snap: Snapshot) -> StaticCapacity:
    """The empty cluster's capacity; reused across cycles through ``snap.static_cache``."""
    cache = snap.static_cache
    if cache is None:
        return StaticCapacity.of(snap.nodes)
    if cache.get("nodes") is not snap.nodes:  # ClusterState.from_snapshot resets it first
        cache.clear()
        cache["nodes"] = snap.nodes
        cache["idle_caps"] = {}
    got = cache.get("static")
    if got is None:
        got = cache["static"] = StaticCapacity.of(snap.nodes)
    return got


_freeze_lock = threading.Lock()
_freezers = 0


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Keep the garbage collector from re-scanning what existed before the cycle.

    A cycle allocates many small objects while 100,000 pending requests are alive,
    and the collector's full passes then scan those requests again and again:
    building the state of 10,000 nodes (10,000 running, 100,000 pending) took
    0.59 s of CPU with the collector as is, 0.22 s with it switched off and 0.36 s
    with the heap frozen (``gc.freeze``), one after the other in one run. Switching
    it off is process-wide: in ``gpuq serve`` the API threads and the estimate
    thread (which runs cycles concurrently) lost their collector during every
    cycle. A freeze only exempts the objects that exist now from the scans, until
    the last concurrent cycle ends; every thread keeps collecting what it makes.
    """
    global _freezers
    with _freeze_lock:
        if _freezers == 0:
            gc.freeze()
        _freezers += 1
    try:
        yield
    finally:
        with _freeze_lock:
            _freezers -= 1
            if _freezers == 0:
                gc.unfreeze()


def schedule(snap: Snapshot) -> CycleResult:
    """Run one cycle on the snapshot and return the decisions (the collector does not
    re-scan the snapshot meanwhile: :func:`frozen_heap`)."""
    with frozen_heap():
        return Cycle(snap).run()
