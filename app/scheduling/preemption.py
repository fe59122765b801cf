"""Victim selection: the cheapest set of running jobs whose removal lets a
pending job fit (pool quota and placement).

Rules (docs/scheduling.md, preemption), each enforced in :func:`candidates`:

- a victim is either a preemptible job of *lower* priority than the
  preemptor, or a borrower whose expired lease the preemptor may reclaim
  (see :mod:`app.scheduling.leases`), or (fair-share preemption, when the
  caller passes ``fair``) a preemptible job of the *same* priority whose
  team would still hold a larger dominant share than the preemptor's team
  after the swap; a non-preemptible job (P0) never is;
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

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Literal

from app.scheduling.books import Books
from app.scheduling.demands import held_kind
from app.scheduling.fair_share import FairShareRule
from app.scheduling.leases import lease_text, pools_below_guarantee, reclaimable_lease
from app.scheduling.model import (
    JobRequest,
    LeaseInfo,
    Preemption,
    ReplicaPlacement,
    RunningJob,
    Snapshot,
)
from app.scheduling.modes import mode_of
from app.scheduling.pools import Charge
from app.scheduling.quota import units_by_type
from app.scheduling.state import ClusterState
from app.scheduling.verdicts import Reason, ReasonCode

# Where a job would go on the state, leaving the state unchanged (None: no fit),
# the contract of placement.place_job.
PlaceFn = Callable[[JobRequest, ClusterState], "list[ReplicaPlacement] | None"]


@dataclass(frozen=True, slots=True)
class Candidate:
    job: RunningJob
    kind: Literal["preempt", "reclaim"]
    cost: float  # CU-seconds of work lost if stopped now
    by: JobRequest | None = None  # the preemptor (for the reason)
    lease: LeaseInfo | None = None  # the expired lease, for a reclaim
    cards: tuple[tuple[str, int], ...] = ()  # whole cards it holds, per node
    fair: bool = False  # a same-priority victim, stopped for fair share

    @property
    def id(self) -> str:
        return self.job.request.id

    @property
    def reason(self) -> Reason:
        """The whole sentence the victim's event and pending reason show (the one
        place it is composed; callers prefix only who decided, e.g. the
        descheduler). Built only for the chosen victims (there may be thousands
        of candidates)."""
        by = self.by
        x = self.lease
        by_id = {"by_job": by.id} if by is not None else {}
        if self.kind == "reclaim" and x is not None:
            who = f" for job {by.id} of pool {by.pool}" if by is not None else ""
            return Reason(ReasonCode.RECLAIMED, f"reclaimed{who}: {lease_text(x)} expired",
                          {**by_id, "lease": x.id})
        if by is None:
            return Reason(ReasonCode.PREEMPTED, "preempted")
        if self.fair:
            return Reason(
                ReasonCode.PREEMPTED_FAIR_SHARE,
                f"preempted by job {by.id} for fair share: team {self.job.request.team} "
                f"would still hold at least its entitlement, team {by.team} is below its own",
                {**by_id, "team": self.job.request.team, "by_team": by.team},
            )
        return Reason(
            ReasonCode.PREEMPTED,
            f"preempted by job {by.id} ({by.priority} > {self.job.request.priority})",
            {**by_id, "priority": self.job.request.priority, "by_priority": by.priority},
        )

    def sort_key(self) -> tuple[int, int, float, str]:
        return (
            self.job.request.priority_value,
            0 if self.kind == "reclaim" else 1,
            self.cost,
            self.id,
        )


def stop_sentence(p: Preemption) -> str:
    """What the victim's event and pending reason say: the core's reason as is
    (a :class:`Reason`, which says what happened and who did it), else with the
    verb and the preemptor put in front (a baseline's "kueue: fair sharing ...").
    Prefixing always once wrote "preempted by job 9: preempted by job 9 (P0 > P1)"."""
    verb = "reclaimed" if p.kind == "reclaim" else "preempted"
    if isinstance(p.reason, Reason):
        return p.reason
    # a baseline's plain text: as is when it already says what happened
    names = p.by_job is not None and re.search(rf"\bjob {re.escape(p.by_job)}\b", p.reason)
    if p.reason.startswith(verb) or names:
        return p.reason
    by = f" by job {p.by_job}" if p.by_job else ""
    return f"{verb}{by}: {p.reason}" if p.reason else f"{verb}{by}"


def lost_work(r: RunningJob, now: float) -> float:
    return r.units * max(0.0, now - r.started_at)


def thrash_partner(job: JobRequest, now: float, window: float) -> str | None:
    """The job that preempted ``job`` within ``window``: ``job`` may not preempt it
    back (the pair would thrash)."""
    at = job.last_preempted_at
    return job.last_preempted_by if at is not None and now - at < window else None


class VictimPool:
    """The preemptible running jobs of one cycle, sorted once by (priority,
    lost work), so each preemptor walks only the lower tiers and pays no
    sort or cost computation per candidate."""

    def __init__(
        self,
        running: Sequence[RunningJob],
        now: float,
        below: Collection[tuple[str, str]] | None = None,
    ) -> None:
        # pools below their guarantee, per type: entitled to reclaim expired leases
        self.below = below
        recs = [
            (r.request.priority_value, lost_work(r, now), r.request.id, r,
             frozenset(p.gpu_type for p in r.placements), _cards(r))
            for r in running
            if r.request.preemptible
        ]
        recs.sort(key=lambda x: (x[0], x[1], x[2]))
        self.recs = recs
        self.prios = [x[0] for x in recs]
        self.leased = [x for x in recs if x[3].leases]
        self.by_node: dict[str, list[tuple]] = {}  # node -> [(rec, whole cards there)]
        for x in recs:
            for name, n in x[5]:
                self.by_node.setdefault(name, []).append((x, n))
        self._fresh: list[tuple] | None = None  # jobs inside min_run_time_s, built on demand

    def protected(
        self, job: JobRequest, names: Collection[str] | None, now: float, min_run: float,
        gone: Collection[str],
    ) -> list[RunningJob] | None:
        """Lower-priority jobs on ``job``'s GPU types that only the minimum run time
        keeps from being victims now, or None. Whether stopping them once they are no
        longer protected would make room is the preemptor's question (the engine asks
        it before a reason promises anything)."""
        if self._fresh is None:
            start = now - min_run
            self._fresh = [x for x in self.recs if x[3].started_at > start]
        hit = [
            x[3] for x in self._fresh
            if x[0] < job.priority_value and x[2] != job.id and x[2] not in gone
            and (names is None or not x[4].isdisjoint(names))
        ]
        return hit or None


def node_groups(
    job: JobRequest,
    snap: Snapshot,
    pool: VictimPool,
    state: ClusterState,
    type_names: Collection[str] | None = None,
    exclude: Collection[str] = (),
    fair: FairShareRule | None = None,
) -> list[list[Candidate]]:
    """Per node, the cheapest prefix of the candidates there that could free
    enough whole cards (all of them for other request modes), best node
    first: highest tier lost, then CU-seconds. Walks each node's jobs (sorted
    once per cycle) and stops as soon as the node would have room, so it
    builds candidates only for the prefixes it ranks. Same eligibility rules
    as :func:`candidates`."""
    cfg = snap.config
    now = snap.now
    names = None if type_names is None else set(type_names)
    need = mode_of(job).whole_cards(job)
    min_start = now - cfg.min_run_time_s
    thrash = thrash_partner(job, now, cfg.thrash_window_s)
    ranked = []
    for name, recs in pool.by_node.items():
        node = state.nodes.get(name)
        if node is None or (need and names is not None and node.gpu_type not in names):
            continue
        have = len(node.free_whole_devices()) if need else 0
        group: list[Candidate] = []
        tier = -1
        total = 0.0
        for (prio, cost, jid, r, types, cards), here in recs:
            if need and have >= need:
                break
            if jid == job.id or jid in exclude or (names is not None and names.isdisjoint(types)):
                continue
            lease = reclaimable_lease(r, job, snap, pool.below) if r.leases else None
            if lease is not None:
                c = Candidate(r, "reclaim", cost, job, lease, cards)
            elif prio < job.priority_value and r.started_at <= min_start and jid != thrash:
                c = Candidate(r, "preempt", cost, job, None, cards)
            elif (fair is not None and prio == job.priority_value and r.started_at <= min_start
                  and jid != thrash and fair(r)):
                c = Candidate(r, "preempt", cost, job, None, cards, fair=True)
            else:
                continue
            group.append(c)
            have += here
            tier = max(tier, prio)
            total += cost
        if not group or (need and have < need):
            continue
        ranked.append((tier, total, name, group))
    ranked.sort(key=lambda x: (x[0], x[1], x[2]))
    return [g for _t, _c, _n, g in ranked]


def _cards(r: RunningJob) -> tuple[tuple[str, int], ...]:
    out: dict[str, int] = {}
    for p in r.placements:
        whole = 0 if held_kind(p).partial_card else len(p.devices)
        out[p.node] = out.get(p.node, 0) + whole
    return tuple(out.items())


def candidates(
    job: JobRequest,
    snap: Snapshot,
    running: Sequence[RunningJob] | VictimPool,
    type_names: Collection[str] | None = None,
    exclude: Collection[str] = (),
    fair: FairShareRule | None = None,
) -> list[Candidate]:
    """Running jobs ``job`` may preempt, in the order they should be tried.

    ``type_names``: GPU types the job may use (None: any, e.g. CPU-only work),
    so jobs holding only other types are not considered."""
    pool = (
        running if isinstance(running, VictimPool)
        else VictimPool(running, snap.now, pools_below_guarantee(snap))
    )
    cfg = snap.config
    now = snap.now
    names = None if type_names is None else set(type_names)

    reclaim: list[Candidate] = []
    taken: set[str] = set()
    for _prio, cost, jid, r, types, cards in pool.leased:
        if jid == job.id or jid in exclude or (names is not None and names.isdisjoint(types)):
            continue
        lease = reclaimable_lease(r, job, snap, pool.below)
        if lease is not None:
            reclaim.append(Candidate(r, "reclaim", cost, job, lease, cards))
            taken.add(jid)
    out: list[Candidate] = []
    min_start = now - cfg.min_run_time_s
    thrash = thrash_partner(job, now, cfg.thrash_window_s)
    hi = bisect_left(pool.prios, job.priority_value)
    top = bisect_right(pool.prios, job.priority_value) if fair is not None else hi
    for i in range(top):
        _prio, cost, jid, r, types, cards = pool.recs[i]
        if (
            r.started_at > min_start
            or jid in exclude
            or jid in taken
            or jid == thrash
            or (names is not None and names.isdisjoint(types))
        ):
            continue
        same = i >= hi
        if same and (fair is None or not fair(r)):
            continue
        out.append(Candidate(r, "preempt", cost, job, None, cards, fair=same))
    if reclaim:
        out.extend(reclaim)
        out.sort(key=Candidate.sort_key)
    return out


class VictimTrial:
    """Remove running jobs from every book one at a time (not all over again per
    question, which costs O(k^2) on a big candidate list), ask whether the job
    fits, and put everything back: one :class:`~app.scheduling.books.Statement`,
    always discarded.

    ``fits`` asks: does the job place, and does its pool pay for it, with
    the removed jobs gone? (``place`` may add the caller's own checks: the team
    quota, which sees the removed jobs' CU given back like every other book.)"""

    def __init__(
        self,
        job: JobRequest,
        books: Books,
        place: PlaceFn,
        may_borrow: bool = True,
    ) -> None:
        self.job, self.place, self.may_borrow = job, place, may_borrow
        self.state, self.pools = books.state, books.pools
        self.stmt = books.statement()
        self.removed: dict[str, RunningJob] = {}

    def remove(self, r: RunningJob) -> None:
        jid = r.request.id
        if jid in self.removed:
            return
        self.removed[jid] = r
        self.stmt.release(r)

    def restore(self, r: RunningJob) -> None:
        if self.removed.pop(r.request.id, None) is not None:
            self.stmt.undo(r)

    def restore_all(self) -> None:
        self.removed.clear()
        self.stmt.discard()  # a what-if is not a release

    def fits(self) -> bool:
        placed = self.place(self.job, self.state)
        if placed is None:
            return False
        plan = self.pools.plan(self.job, units_by_type(placed), self.may_borrow)
        return isinstance(plan, Charge)


def find_victims(
    job: JobRequest,
    cands: Sequence[Candidate] | Callable[[], Sequence[Candidate]],
    w: VictimTrial,
    max_nodes: int = 16,
    groups: list[list[Candidate]] | None = None,
) -> list[Candidate] | None:
    """The minimal cheap victim set that makes the job fit, or None.

    ``cands`` in preference order (see :func:`candidates`). First node by
    node, the way kube-scheduler preempts: for a single-replica job, the
    nodes whose candidates could free enough cards are ranked by the
    highest tier they would lose, then by CU-seconds; the first node where
    the job then fits wins. Otherwise (gangs, quota-only shortfalls) the
    global list is removed in doubling batches until the job fits. Either
    way every victim that turns out unnecessary is put back (most valuable
    first), so the set is minimal. State and ledger are left unchanged.

    ``cands`` may be a callable building the list only if the node-by-node
    pass (``groups``, from :func:`node_groups`, else derived from ``cands``)
    finds nothing."""
    try:
        if w.fits():
            return []
        if job.replicas == 1 or job.min_available == 1:
            if groups is None:
                groups = _node_groups(job, cands() if callable(cands) else cands, w.state)
            for group in groups[:max_nodes]:
                for c in group:
                    w.remove(c.job)
                if w.fits():
                    return _minimize(group, w)
                w.restore_all()
        if callable(cands):
            cands = cands()
        removed: list[Candidate] = []
        step, i = 1, 0
        while i < len(cands):
            for c in cands[i : i + step]:
                w.remove(c.job)
                removed.append(c)
            i += step
            step *= 2
            if w.fits():
                return _minimize(removed, w)
        return None
    finally:
        w.restore_all()


def _minimize(chosen: list[Candidate], w: VictimTrial) -> list[Candidate]:
    """Put back every victim the job can do without, most valuable first."""
    keep = list(chosen)
    for c in sorted(chosen, key=Candidate.sort_key, reverse=True):
        w.restore(c.job)
        if w.fits():
            keep.remove(c)
        else:
            w.remove(c.job)
    return keep


def _node_groups(
    job: JobRequest, cands: Sequence[Candidate], state: ClusterState
) -> list[list[Candidate]]:
    """Per node, the cheapest prefix of its candidates that could free enough
    whole cards (all of them for other request modes), best node first."""
    by_node: dict[str, list[tuple[Candidate, int]]] = {}
    for c in cands:
        for name, n in c.cards or _cards(c.job):
            by_node.setdefault(name, []).append((c, n))
    need = mode_of(job).whole_cards(job)
    ranked = []
    for name, held in by_node.items():
        node = state.nodes.get(name)
        if node is None:
            continue
        if need:
            have = len(node.free_whole_devices())
            group: list[Candidate] = []
            for c, n in held:
                if have >= need:
                    break
                group.append(c)
                have += n
            if have < need:
                continue
        else:
            group = [c for c, _n in held]
        tier = max((c.job.request.priority_value for c in group), default=-1)
        ranked.append((tier, sum(c.cost for c in group), name, group))
    ranked.sort(key=lambda x: (x[0], x[1], x[2]))
    return [g for _t, _c, _n, g in ranked]


def to_preemptions(job: JobRequest, victims: Sequence[Candidate]) -> list[Preemption]:
    return [Preemption(job_id=v.id, reason=v.reason, by_job=job.id, kind=v.kind) for v in victims]
