"""Job events read once each, in id order, without missing a late commit.

The metrics histograms (queue wait, JCT) and the preemption / reclaim
counters are observed from ``job_events`` as they are written, never
recomputed from the whole history: each pass reads only the events after
the last one it saw (the primary key index).

Event ids come from a sequence, handed out when a row is *inserted*, not
when its transaction *commits*: a dispatcher transaction holding id 500
may commit after another one that used 600. "id > last seen" alone would
skip 500 for good. So the feed remembers the ids it jumped over (gaps) and
asks for them again on later passes, until they show up or ``gap_timeout_s``
passes (an id whose transaction rolled back never appears).

A new feed (a process start) first reads the events of the last
``backfill`` seconds (``ix_job_events_at``), so a restarted server's
histograms cover that window again.

What each event yields (computed by the database, from the job's own events):

- ``admit`` (``pending -> admitted``): the wait of this queueing episode,
  every second the job spent pending since its previous admission (the same
  seconds ``jobs.waited_s`` adds up, requeues and ``unschedulable`` spells
  included): the sum over consecutive events of the job, from its previous
  admission up to this one, of the time between an event that left it
  ``pending`` and the next event;
- ``finish`` (``admitted|running -> succeeded``): submit to finish (JCT);
- ``stop``: a ``preempted`` or ``reclaimed`` event, with its reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.orm import Session

GAP_CAP = 50_000  # ids remembered at most (oldest forgotten first)
BACKFILL_GAP_IDS = 1_000  # after a backfill, only the newest ids may still be in flight

_SELECT = """
    SELECT e.id, e.type, e.reason, e.reason_code, e.at, j.pool, j.priority, j.team, j.submitted_at,
        CASE
            WHEN e.to_status = 'admitted' AND e.from_status = 'pending' THEN 'admit'
            WHEN e.to_status = 'succeeded' AND e.from_status IN ('admitted', 'running')
                THEN 'finish'
            WHEN e.type IN ('preempted', 'reclaimed') THEN 'stop'
        END AS kind,
        CASE WHEN e.to_status = 'admitted' AND e.from_status = 'pending' THEN (
            SELECT COALESCE(SUM(EXTRACT(EPOCH FROM (s.next_at - s.at))), 0)
            FROM (
                SELECT p.id, p.at, p.to_status, lead(p.at) OVER (ORDER BY p.id) AS next_at,
                    max(p.id) FILTER (WHERE p.to_status = 'admitted'
                        AND p.from_status = 'pending' AND p.id < e.id) OVER () AS previous
                FROM job_events AS p
                WHERE p.job_id = e.job_id  -- a job's few events, through ix_job_events_job_id
            ) AS s
            WHERE s.to_status = 'pending' AND s.next_at IS NOT NULL
                AND s.id < e.id AND s.id >= COALESCE(s.previous, 0)
        ) END AS wait_s
    FROM job_events AS e
    -- each event's job by primary key: a plain join let a generic plan (psycopg
    -- prepares a statement run 5 times) hash the whole jobs table for a few events
    CROSS JOIN LATERAL (
        SELECT jj.pool, jj.priority, jj.team, jj.submitted_at FROM jobs AS jj
        WHERE jj.id = e.job_id
    ) AS j
"""
_AFTER = text(
    _SELECT
    + " WHERE e.id > :after OR e.id = ANY(CAST(:missing AS bigint[])) ORDER BY e.id"
)
_SINCE = text(_SELECT + " WHERE e.at >= :since ORDER BY e.id")
_MAX_ID = text("SELECT COALESCE(max(id), 0) FROM job_events")


@dataclass(frozen=True, slots=True)
class FeedEvent:
    """One event worth observing, with the labels of its job."""

    id: int
    kind: str  # admit | finish | stop
    type: str
    reason: str | None
    reason_code: str | None  # job_events.reason_code: what the stop counters group by
    at: datetime
    pool: str
    priority: str
    team: str
    submitted_at: datetime
    wait_s: float | None  # admit: the wait of the episode that this admission ends

    @property
    def jct_s(self) -> float:
        return max(0.0, (self.at - self.submitted_at).total_seconds())


class EventFeed:
    """A cursor over ``job_events`` that yields every committed event exactly once."""

    def __init__(
        self, *, gap_timeout_s: float = 300.0, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self.gap_timeout_s = gap_timeout_s
        self.monotonic = monotonic
        self.high: int | None = None  # the highest id read
        self.missing: dict[int, float] = {}  # ids below ``high`` not seen yet -> first noticed

    def read(self, session: Session, backfill_since: datetime) -> list[FeedEvent]:
        """The events committed since the last read (the first read: since ``backfill_since``)."""
        now = self.monotonic()
        if self.high is None:
            rows = session.execute(_SINCE, {"since": backfill_since}).all()
            if rows:
                self._note_gaps([r.id for r in rows], now, floor=rows[-1].id - BACKFILL_GAP_IDS)
            else:  # nothing in the window: start after the newest event
                self.high = int(session.scalar(_MAX_ID))
        else:
            rows = session.execute(
                _AFTER, {"after": self.high, "missing": list(self.missing)}
            ).all()
            for r in rows:
                self.missing.pop(r.id, None)
            self._note_gaps([r.id for r in rows if r.id > self.high], now, floor=self.high)
        self._expire(now)
        return [
            FeedEvent(
                id=r.id,
                kind=r.kind,
                type=r.type,
                reason=r.reason,
                reason_code=r.reason_code,
                at=r.at,
                pool=r.pool,
                priority=r.priority,
                team=r.team,
                submitted_at=r.submitted_at,
                wait_s=float(r.wait_s) if r.wait_s is not None else None,
            )
            for r in rows
            if r.kind is not None
        ]

    def _note_gaps(self, ids: list[int], now: float, floor: int) -> None:
        """Remember the ids above ``floor`` that ``ids`` (ascending) jumped over (after a
        backfill, only ids between two events read: older ones lie outside its window)."""
        if not ids:
            return
        prev = self.high if self.high is not None else ids[0]
        for i in ids:
            for gap in range(max(prev, floor) + 1, i):
                self.missing[gap] = now
            prev = max(prev, i)
        self.high = max(self.high or 0, prev)
        while len(self.missing) > GAP_CAP:
            self.missing.pop(next(iter(self.missing)))

    def _expire(self, now: float) -> None:
        """Forget ids whose transaction had ``gap_timeout_s`` to commit (rolled back)."""
        old = [i for i, seen in self.missing.items() if now - seen >= self.gap_timeout_s]
        for i in old:
            del self.missing[i]
