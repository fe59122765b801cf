"""Fair dispatch order, re-decided after every admission.

Key, best first: priority class; pools below their guarantee; the team's
key from its entitlement and deficit (:func:`gpuq.scheduling.deficit.team_key`:
what it holds per unit of entitlement, then the credit it has built up while
short of its entitlement; re-read from the live ledger, so a team that just
got a job moves back); then age. There is no aging knob: a team that waits
gains credit, which earns its promoted job a reservation
(:mod:`gpuq.scheduling.deficit`), and a job that waits is promoted within its
team (below).

Within a team, among jobs of one priority: **promoted** jobs first, by age
-- a job that was requeued (preempted, reclaimed: it keeps its place and is
never queued behind its own team's younger small jobs), or that has waited
``PROMOTE`` times its predicted run time, or the hard cap
``reservation_after_s``; then the shortest predicted run time
(``JobRequest.expected_s``: the estimate, else the prediction from the team's
history of similar jobs; none counts as ``unknown_s``), then age. A
promoted job that does not fit gets a reservation when its team is owed it
(:mod:`gpuq.scheduling.engine`), so a long job is never starved by a stream
of short ones of its own team either.

Each team keeps its own queue; a heap holds one head per team, so the
order costs O(log teams) per job even with 100,000 pending.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from operator import attrgetter

from gpuq.scheduling.model import JobRequest
from gpuq.scheduling.quota import QuotaLedger

_AGE = attrgetter("submitted_at", "id")
_PRIO = attrgetter("priority_value")

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


class FairOrder:
    """Jobs in dispatch order; ``team_key(team)`` (lower first) is re-read whenever
    the ledger changed (after an admission or a stop)."""

    def __init__(
        self, pending: Iterable[JobRequest], ledger: QuotaLedger, now: float,
        team_key: Callable[[str], object] | None = None, shortest_first: bool = True,
        unknown_duration_s: float = 3600.0, cap_s: float = float("inf"),
    ) -> None:
        self.ledger = ledger
        self.now = now
        self.team_key = team_key or ledger.dominant_share
        queues: dict[str, list[JobRequest]] = {}
        for j in pending:
            queues.setdefault(j.team, []).append(j)
        for team, q in queues.items():
            # stable C-level sorts, last key first (several times faster than one sort by
            # (-priority, promoted first, age if promoted else the prediction, age, id),
            # which this equals): age, the shortest predicted, promoted first, priority
            q.sort(key=_AGE)
            if shortest_first and any(
                j.expected_s is not None or j.preemption_count for j in q
            ):
                unknown = unknown_duration_s
                run = {id(j): unknown if j.expected_s is None else j.expected_s for j in q}
                q.sort(key=lambda j: run[id(j)])
                oldest = now - cap_s
                first = [j for j in q if j.preemption_count or j.submitted_at <= oldest
                         or now - j.submitted_at >= PROMOTE * run[id(j)]]
                if first:
                    first.sort(key=_AGE)
                    ids = {id(j) for j in first}
                    q = queues[team] = first + [j for j in q if id(j) not in ids]
            q.sort(key=_PRIO, reverse=True)
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
