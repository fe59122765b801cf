"""The records of recent jobs, kept between reports and refreshed by what changed.

A one-day fairness report over a busy cluster covers ~10,000 jobs. Reading
them (and the GPU type each ended one ran on) and turning the rows into
records cost most of a report. :class:`WindowRecords` keeps what a report
reads per job and, on the next report, re-reads only the job rows written
since its last look: ``jobs.xact >= pg_snapshot_xmin`` of that look, the
same watermark as the dispatcher's picture (see :mod:`app.dispatch.picture`
for why it misses no late commit). A job's submit, admit and finish times,
status and GPU type only change with a write of its row, so the kept records
plus the re-read rows are exactly what :func:`~app.reports.queries.job_records`
would read now; a pending job's wait grows with the clock, so its record is
rebuilt per report.

The cache covers the jobs active since the earliest start of a window it
served; a longer window than that (or one beyond ``max_window_s``, or the
first report, or every ``full_reload_s``) reads its window in full. Jobs are
never deleted by gpuq; a deleted row would stay until the next full read.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.reports.queries import changed_rows, job_types, to_records, window_rows
from app.reports.records import JobRecord
from app.store.live_allocations import XMIN


class WindowRecords:
    """:func:`~app.reports.queries.job_records` for windows up to ``max_window_s``,
    at the cost of the jobs written since the last call. Thread-safe."""

    def __init__(self, *, max_window_s: float = 7 * 86400.0, full_reload_s: float = 3600.0):
        self.max_window_s = max_window_s
        self.full_reload_s = full_reload_s
        self._lock = threading.Lock()
        self._covered: datetime | None = None  # every job active since then is kept
        self._watermark: int | None = None
        self._revision: int | None = None  # the catalog's (pools type the jobs never run)
        self._last_full = 0.0
        # job id -> (row, its record: fixed unless the job is pending, its last activity)
        self._jobs: dict[int, tuple[Any, JobRecord | None, float]] = {}
        self.last_rows = 0  # job rows the last call read (for tests and benchmarks)

    def records(self, session: Session, now: datetime, window_s: float | None) -> list[JobRecord]:
        """The records :func:`~app.reports.queries.job_records` returns for this window."""
        if window_s is None or window_s > self.max_window_s:
            rows = window_rows(session, now, window_s)
            self.last_rows = len(rows)
            return to_records(session, rows, job_types(session, rows), now)
        since = now - timedelta(seconds=window_s)
        with self._lock:
            self._refresh(session, now, since, window_s)
            start = since.timestamp()
            pending, out = [], []
            for row, rec, last in self._jobs.values():
                if rec is None:
                    pending.append(row)
                elif last >= start:  # JobRecord.active_since, precomputed
                    out.append(rec)
            out.extend(to_records(session, pending, {}, now))  # typed by what they wait for
            return out

    def _refresh(self, session: Session, now: datetime, since: datetime, window_s: float) -> None:
        conn = session.connection()
        xmin, revision = conn.execute(_LOOK).one()  # before the read: it misses only >= xmin
        full = (
            self._covered is None
            or since < self._covered
            or revision != self._revision
            or time.monotonic() - self._last_full > self.full_reload_s
        )
        if full:
            rows = window_rows(session, now, window_s)
            self._jobs = {}
            self._covered = since
            self._last_full = time.monotonic()
        else:
            assert self._watermark is not None
            rows = changed_rows(session, self._watermark)
        self.last_rows = len(rows)
        ended = [r for r in rows if r.status != "pending"]
        recs = to_records(session, ended, job_types(session, ended), now)
        for r in rows:
            if r.status == "pending":
                self._jobs[r.id] = (r, None, 0.0)
        assert self._covered is not None
        covered = self._covered.timestamp()
        for r, rec in zip(ended, recs, strict=True):
            times = (rec.submitted_at, rec.admitted_at, rec.finished_at)
            last = max(t for t in times if t is not None)
            if last >= covered:
                self._jobs[r.id] = (r, rec, last)
            else:  # out of every window this cache serves (unless written again)
                self._jobs.pop(r.id, None)
        self._watermark, self._revision = int(xmin), revision


_LOOK = text(
    f"{XMIN.text}, (SELECT revision FROM catalog_revision WHERE id = 1)"
)
