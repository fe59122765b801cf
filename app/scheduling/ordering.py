"""Fair dispatch order, re-decided after every admission.

Key, best first: priority class; pools below their guarantee; the team's
key from its entitlement and deficit (:func:`app.scheduling.deficit.team_key`:
what it holds per unit of entitlement, then the credit it has built up while
short of its entitlement; re-read from the live ledger, so a team that just
got a job moves back); then age. There is no aging knob: a team that waits
gains credit, which earns its promoted job a reservation
(:mod:`app.scheduling.deficit`), and a job that waits is promoted within its
team (below).

Within a team, among jobs of one priority: **promoted** jobs first, by age
-- a job that was requeued (preempted, reclaimed: it keeps its place and is
never queued behind its own team's younger small jobs), or that has waited
``PROMOTE`` times its predicted run time, or the hard cap
``reservation_after_s``; then the shortest predicted run time
(``JobRequest.expected_s``: the estimate, else the prediction from the team's
history of similar jobs; none counts as ``unknown_s``), then age. A
promoted job that does not fit gets a reservation when its team is owed it
(:mod:`app.scheduling.engine`), so a long job is never starved by a stream
of short ones of its own team either.

Each team keeps its own queue; a heap holds one head per team, so the
order costs O(log teams) per job even with 100,000 pending.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from operator import attrgetter, le

import numpy as np

from app.scheduling.model import JobRequest
from app.scheduling.quota import QuotaLedger

_AGE = attrgetter("submitted_at", "id")
_PRIO = attrgetter("priority_value")
_SUBMITTED = attrgetter("submitted_at")
_ESTIMATE = attrgetter("duration_estimate_s")
_PREDICTED = attrgetter("predicted_s")
_REQUEUED = attrgetter("preemption_count")
_ORDER_SHAPE = attrgetter("priority_value", "preemption_count", "duration_estimate_s")

# A job waiting this many times its predicted run time is promoted within its team:
# a job's slowdown from its own team's shorter work is at most about PROMOTE + 1
# (shortest-first's gain is kept for jobs that wait less than that).
PROMOTE = 2.0


def promoted(j: JobRequest, now: float, cap_s: float, unknown_s: float) -> bool:
    """Requeued, or waited ``PROMOTE`` x its predicted run time, or the hard cap."""
    if j.preemption_count > 0:
        return True
    waited = now - j.submitted_at
    est = j.expected_s
    return waited >= min(cap_s, PROMOTE * (est if est is not None else unknown_s))


def in_age_order(pending: Iterable[JobRequest]) -> list[JobRequest]:
    """``pending`` sorted by (submitted_at, id). A caller's list is usually in that order
    already (the store reads it so): then it is only checked (C-level passes over the
    submit times; the ids compared only where submit times tie), not sorted again."""
    jobs = list(pending)
    subs = list(map(_SUBMITTED, jobs))
    if all(map(le, subs, subs[1:])):
        at = np.asarray(subs, dtype=float)
        ties = np.flatnonzero(at[1:] == at[:-1]).tolist()  # i: jobs i and i + 1 tie
        if all(jobs[i].id <= jobs[i + 1].id for i in ties):
            return jobs
    jobs.sort(key=_AGE)
    return jobs


def team_queue(q: list[JobRequest], now: float, shortest_first: bool, unknown_s: float,
               cap_s: float) -> list[JobRequest]:
    """One team's jobs (``q``, in age order) in their dispatch order: by priority
    (highest first), then promoted jobs by age, then the rest by predicted run time
    (``unknown_s`` for none) and age -- one stable sort by (-priority, not promoted,
    0 if promoted else the prediction), as :func:`team_queue_reference` states it."""
    n = len(q)
    if n < 2:
        return q
    # the common backlog first, in one pass over the jobs: one priority, one estimate (not
    # NaN), nobody requeued -- the age order, as the sorts below would leave it
    shapes = list(map(_ORDER_SHAPE, q))
    first = shapes[0]
    if first[1] == 0 and first[2] is not None and first[2] == first[2] and (
            shapes.count(first) == n):
        return q
    prio = list(map(_PRIO, q))
    same_prio = min(prio) == max(prio)
    requeued = list(map(_REQUEUED, q))
    est: list[float | None] = list(map(_ESTIMATE, q))
    if None in est:
        est = [e if e is not None else p for e, p in zip(est, map(_PREDICTED, q), strict=True)]
        if not shortest_first or (not any(requeued) and est.count(None) == n):
            # no prediction and nobody requeued: by age within each priority
            return q if same_prio else sorted(q, key=_PRIO, reverse=True)
        est = [unknown_s if e is None else e for e in est]
    elif not shortest_first:
        return q if same_prio else sorted(q, key=_PRIO, reverse=True)
    run = np.asarray(est, dtype=float)
    if np.isnan(run).any():  # no order of its own: the reference's sorts decide
        return team_queue_reference(q, now, shortest_first, unknown_s, cap_s)
    if same_prio and not any(requeued) and run.min() == run.max():
        # one prediction for all: promotion (waited the cap or PROMOTE x the prediction)
        # is then a prefix of the age order, and the rest is in age order too
        return q
    sub = np.fromiter(map(_SUBMITTED, q), dtype=float, count=n)
    first = (np.asarray(requeued) != 0) | (sub <= now - cap_s) | (now - sub >= PROMOTE * run)
    keys: tuple = (np.where(first, 0.0, run), ~first)
    if not same_prio:
        keys += (-np.asarray(prio, dtype=np.int64),)
    order = np.lexsort(keys)  # stable: equal keys keep the age order
    return [q[i] for i in order.tolist()]


def team_queue_reference(q: list[JobRequest], now: float, shortest_first: bool,
                         unknown_s: float, cap_s: float) -> list[JobRequest]:
    """:func:`team_queue` as plain stable sorts (the definition; ``q`` in age order)."""
    q = list(q)
    if shortest_first and any(j.expected_s is not None or j.preemption_count for j in q):
        run = {id(j): unknown_s if j.expected_s is None else j.expected_s for j in q}
        q.sort(key=lambda j: run[id(j)])
        oldest = now - cap_s
        first = [j for j in q if j.preemption_count or j.submitted_at <= oldest
                 or now - j.submitted_at >= PROMOTE * run[id(j)]]
        if first:
            first.sort(key=_AGE)
            ids = {id(j) for j in first}
            q = first + [j for j in q if id(j) not in ids]
    q.sort(key=_PRIO, reverse=True)
    return q


class FairOrder:
    """Jobs in dispatch order; ``team_key(team)`` (lower first) is re-read whenever
    the ledger changed (after an admission or a stop)."""

    def __init__(
        self, pending: Iterable[JobRequest], ledger: QuotaLedger, now: float,
        team_key: Callable[[str], object] | None = None, shortest_first: bool = True,
        unknown_duration_s: float = 3600.0, cap_s: float = float("inf"),
        aged: bool = False,
    ) -> None:
        """``aged``: ``pending`` is a list already in age order (:func:`in_age_order`)."""
        self.ledger = ledger
        self.now = now
        self.team_key = team_key or ledger.dominant_share
        queues: dict[str, list[JobRequest]] = {}
        for j in pending if aged else in_age_order(pending):
            queues.setdefault(j.team, []).append(j)
        for team, q in queues.items():
            queues[team] = team_queue(q, now, shortest_first, unknown_duration_s, cap_s)
        self.queues = queues
        self._share: dict[str, tuple[int, object]] = {}
        self._below: dict[str, tuple[int, int]] = {}

    def _key(self, j: JobRequest) -> tuple:
        ledger = self.ledger
        v = ledger.version
        c = self._share.get(j.team)
        if c is None or c[0] != v:
            c = (v, self.team_key(j.team))
            self._share[j.team] = c
        b = self._below.get(j.pool)
        if b is None or b[0] != v:
            b = (v, 0 if ledger.pool_below_guarantee(j.pool) else 1)
            self._below[j.pool] = b
        return (-j.priority_value, b[1], c[1], j.submitted_at, j.id)

    def __iter__(self) -> Iterator[JobRequest]:
        if len(self.queues) == 1:  # one team: its own queue is the order
            yield from next(iter(self.queues.values()))
            return
        heap = [(self._key(q[0]), team, 0) for team, q in self.queues.items()]
        heapq.heapify(heap)
        queues = self.queues
        ledger = self.ledger
        shares, belows = self._share, self._below
        team_key = self.team_key
        replace, pop = heapq.heapreplace, heapq.heappop
        while heap:
            _, team, pos = heap[0]
            q = queues[team]
            yield q[pos]  # the caller admits (or not) before we read the ledger again
            pos += 1
            if pos < len(q):
                # _key, inlined: this runs once per pending job
                j = q[pos]
                v = ledger.version
                c = shares.get(team)
                if c is None or c[0] != v:
                    c = (v, team_key(team))
                    shares[team] = c
                b = belows.get(j.pool)
                if b is None or b[0] != v:
                    b = (v, 0 if ledger.pool_below_guarantee(j.pool) else 1)
                    belows[j.pool] = b
                replace(heap, ((-j.priority_value, b[1], c[1], j.submitted_at, j.id), team, pos))
            else:
                pop(heap)
