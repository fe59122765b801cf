"""Fair dispatch order, re-decided after every admission.

Key, best first: priority class; pools below their guarantee; the team's
dominant share (CU in use / weight, read from the live ledger, so a team
that just got a job moves back); then age. A job older than ``aging_s``
no longer waits for its team's share (it sorts as if its team used
nothing), so a busy team's old job is not starved by newer teams.

Why ``aging_s`` and ``reservation_after_s`` default to 12 hours, not one
hour and 30 minutes: under a backlog of hours (Philly at load 1.2, a week at
load 1.0) an hour-long aging made every job that had waited an hour sort by
age alone, so the queue became FIFO across teams exactly when fair share
mattered, and a light team's 8-GPU job waited days behind a heavy team's
backlog (Kueue, which orders by share with no aging, let it in within
minutes). And a reservation after 30 minutes held whole A100 nodes idle for
a heavy team's 16-GPU gangs, because jobs without an estimate may not
backfill held capacity. After 12 hours of waiting a job stops waiting for
its team's share and gets capacity held: no starvation, but fair share and
backfill decide the first 12 hours. Chosen from the variants measured on
the suite and checked on two held-out Philly windows (docs/evaluation.md has
the table: 1 h to 2 days and none for each).

Within a team (``shortest_first``): among jobs of one priority, a job that
declares ``duration_estimate_s`` goes before longer ones (a job without an
estimate counts as ``unknown_duration_s``); a job that has waited
``reservation_after_s`` (or ``aging_s``, if shorter) goes before all of them
by age, so it is looked at first and gets its reservation: a long job is
never starved by a stream of short ones. Without any estimate the order is
by age.

Each team keeps its own queue; a heap holds one head per team, so the
order costs O(log teams) per job even with 100,000 pending.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from operator import attrgetter

from app.scheduling.model import JobRequest
from app.scheduling.quota import QuotaLedger

_AGE = attrgetter("submitted_at", "id")
_PRIO = attrgetter("priority_value")


def team_sort_key(j: JobRequest, oldest: float, unknown_s: float) -> tuple:
    """Within a team: priority; jobs waiting since ``oldest`` (due a reservation or
    aged) first, by age; then the shortest estimate (none = ``unknown_s``), then age."""
    if j.submitted_at <= oldest:
        return (-j.priority_value, 0, j.submitted_at, j.submitted_at, j.id)
    est = j.duration_estimate_s if j.duration_estimate_s is not None else unknown_s
    return (-j.priority_value, 1, est, j.submitted_at, j.id)


class FairOrder:
    def __init__(
        self, pending: Iterable[JobRequest], ledger: QuotaLedger, now: float, aging_s: float,
        shortest_first: bool = False, unknown_duration_s: float = 3600.0,
        reservation_after_s: float = 0.0,
    ) -> None:
        self.ledger = ledger
        self.now = now
        self.aging_s = aging_s
        queues: dict[str, list[JobRequest]] = {}
        for j in pending:
            queues.setdefault(j.team, []).append(j)
        protect = [x for x in (aging_s, reservation_after_s) if x > 0]
        oldest = now - min(protect) if protect else -float("inf")
        for q in queues.values():
            if shortest_first and any(j.duration_estimate_s is not None for j in q):
                q.sort(key=lambda j: team_sort_key(j, oldest, unknown_duration_s))
                continue
            # two stable C-level sorts == sorting by (-priority, submitted_at, id), several
            # times faster than one sort by that key
            q.sort(key=_AGE)
            q.sort(key=_PRIO, reverse=True)
        self.queues = queues
        self._share: dict[str, tuple[int, float]] = {}
        self._below: dict[str, tuple[int, int]] = {}

    def _key(self, j: JobRequest) -> tuple:
        ledger = self.ledger
        v = ledger.version
        if self.aging_s > 0 and self.now - j.submitted_at >= self.aging_s:
            share = -1.0
        else:
            c = self._share.get(j.team)
            if c is None or c[0] != v:
                c = (v, ledger.dominant_share(j.team))
                self._share[j.team] = c
            share = c[1]
        b = self._below.get(j.pool)
        if b is None or b[0] != v:
            b = (v, 0 if ledger.pool_below_guarantee(j.pool) else 1)
            self._below[j.pool] = b
        return (-j.priority_value, b[1], share, j.submitted_at, j.id)

    def __iter__(self) -> Iterator[JobRequest]:
        if len(self.queues) == 1:  # one team: its own queue is the order
            yield from next(iter(self.queues.values()))
            return
        heap = [(self._key(q[0]), team, 0) for team, q in self.queues.items()]
        heapq.heapify(heap)
        queues = self.queues
        ledger = self.ledger
        shares, belows = self._share, self._below
        aging, oldest = self.aging_s, self.now - self.aging_s
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
                if aging > 0 and j.submitted_at <= oldest:
                    share = -1.0
                else:
                    c = shares.get(team)
                    if c is None or c[0] != v:
                        c = (v, ledger.dominant_share(team))
                        shares[team] = c
                    share = c[1]
                b = belows.get(j.pool)
                if b is None or b[0] != v:
                    b = (v, 0 if ledger.pool_below_guarantee(j.pool) else 1)
                    belows[j.pool] = b
                replace(heap, ((-j.priority_value, b[1], share, j.submitted_at, j.id), team, pos))
            else:
                pop(heap)
