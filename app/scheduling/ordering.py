"""Fair dispatch order, re-decided after every admission.

Key, best first: priority class; pools below their guarantee; the team's
dominant share (CU in use / weight, read from the live ledger, so a team
that just got a job moves back); then age. A job older than ``aging_s``
no longer waits for its team's share (it sorts as if its team used
nothing), so a busy team's old job is not starved by newer teams.

Each team keeps its own queue; a heap holds one head per team, so the
order costs O(log teams) per job even with 100,000 pending.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator

from app.scheduling.model import JobRequest
from app.scheduling.quota import QuotaLedger


def job_sort_key(j: JobRequest) -> tuple[int, float, str]:
    return (-j.priority_value, j.submitted_at, j.id)


class FairOrder:
    def __init__(
        self, pending: Iterable[JobRequest], ledger: QuotaLedger, now: float, aging_s: float
    ) -> None:
        self.ledger = ledger
        self.now = now
        self.aging_s = aging_s
        queues: dict[str, list[JobRequest]] = {}
        for j in pending:
            queues.setdefault(j.team, []).append(j)
        for q in queues.values():
            q.sort(key=job_sort_key)
        self.queues = queues

    def _key(self, j: JobRequest) -> tuple:
        aged = self.aging_s > 0 and self.now - j.submitted_at >= self.aging_s
        share = -1.0 if aged else self.ledger.dominant_share(j.team)
        below = 0 if self.ledger.pool_below_guarantee(j.pool) else 1
        return (-j.priority_value, below, share, j.submitted_at, j.id)

    def __iter__(self) -> Iterator[JobRequest]:
        if len(self.queues) == 1:  # one team: its own queue is the order
            yield from next(iter(self.queues.values()))
            return
        heap = []
        for team, q in self.queues.items():
            heap.append((self._key(q[0]), team, 0))
        heapq.heapify(heap)
        while heap:
            _, team, pos = heapq.heappop(heap)
            q = self.queues[team]
            yield q[pos]  # the caller admits (or not) before we read the ledger again
            pos += 1
            if pos < len(q):
                heapq.heappush(heap, (self._key(q[pos]), team, pos))
