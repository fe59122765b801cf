"""The dispatcher's in-memory picture of the queue, refreshed incrementally.

Rebuilding the snapshot from every pending job each second costs far more
than the scheduling core itself (ORM objects, spec validation, allocations
of every running job). :class:`QueuePicture` keeps the core's view of each
live job (pending, admitted, running) between cycles and re-reads only the
job rows written since its last look.

"Written since" is keyed on ``jobs.xact``, the 64-bit id of the transaction
that last took a revision for the row (trigger, migration 0002), not on the
revision itself: revision values are handed out in the order they are
*taken*, not the order their transactions *commit*, so "revision > N" could
skip a slow writer's row for good. Before each read the picture notes
``pg_snapshot_xmin(pg_current_snapshot())``: every transaction below it
has finished, so the next refresh asks for ``xact >= that`` and sees every
row committed since (plus a few it saw already - re-reading is harmless).

Allocations and leases only change together with a new revision of their
job (the state rules), so they are re-read for the changed active jobs.
GPU types, nodes, pools, teams, priorities and the scheduler knobs are
small and read in full every cycle; when pools or priorities change (they
shape every cached request) the picture reloads everything. It also
reloads on the first pass, after :meth:`invalidate` (a failed pass, a new
leader) and every ``full_reload_s`` as a safety net.
"""

from __future__ import annotations

import re
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.clock import to_epoch
from app.dispatch.releasing_view import hold_releasing_in_context
from app.domain.states import ACTIVE
from app.scheduling.model import (
    JobRequest,
    LeaseInfo,
    PoolInfo,
    PriorityInfo,
    ReplicaPlacement,
    RunningJob,
    SchedulerConfig,
)
from app.scheduling.verdicts import from_stored
from app.store.config_loader import scheduler_knobs
from app.store.convert import job_request, lease_info, placement_of
from app.store.live_allocations import XMIN, live_allocations
from app.store.orm import (
    AllocationRow,
    JobRow,
    LeaseRow,
)
from app.store.queue_order import last_writer
from app.store.snapshot import Catalog, SnapshotContext, read_catalog, with_preemption_history

LIVE = ("pending", *sorted(ACTIVE))
_DIGITS = re.compile(r"\d+(\.\d+)?")
JOBS = JobRow.__table__
JOB_COLUMNS = (
    JOBS.c.id,
    JOBS.c.status,
    JOBS.c.revision,
    JOBS.c.reason,
    JOBS.c.reason_code,
    JOBS.c.queue_position,
    JOBS.c.spec,
    JOBS.c.pool,
    JOBS.c.priority,
    JOBS.c.submitted_at,
    JOBS.c.admitted_at,
    JOBS.c.started_at,
    JOBS.c.preemption_count,
    JOBS.c.longest_attempt_s,
)


@dataclass(slots=True)
class JobEntry:
    """What the picture knows of one live job."""

    status: str
    revision: int
    reason: str | None  # a Reason when it was stored with a code this release knows
    position: int | None
    request: JobRequest
    running: RunningJob | None = None
    reason_at: float | None = None  # when this picture last wrote the reason (clock epoch)
    start_at: float | None = None  # the start that reason names, as written (epoch)


@dataclass
class RefreshStats:
    full: bool = False
    rows: int = 0  # job rows read
    seconds: float = 0.0


class QueuePicture:
    def __init__(self, *, full_reload_s: float = 300.0) -> None:
        self.full_reload_s = full_reload_s
        self.entries: dict[int, JobEntry] = {}
        self.watermark: int | None = None  # pg_snapshot_xmin at the last look
        self._last_full = 0.0
        self._catalog: tuple[dict[str, PoolInfo], dict[str, PriorityInfo]] | None = None
        self.last = RefreshStats()
        self.written_order: list[int] | None = None  # queue_order as last committed
        self.owner = uuid.uuid4().hex  # written into queue_order.writer

    def invalidate(self) -> None:
        """Forget everything; the next refresh reads every live job."""
        self.watermark = None
        self.written_order = None

    # reading ---------------------------------------------------------------

    def refresh(self, session: Session, now: datetime) -> SnapshotContext:
        """Bring the picture up to date and return the snapshot for one cycle
        (capacity that stopping Pods still hold is marked used, as in build_snapshot)."""
        t0 = time.perf_counter()
        conn = session.connection()
        catalog = read_catalog(session)
        pools, priorities = catalog.pools, catalog.priorities
        config = SchedulerConfig.from_mapping(scheduler_knobs(session))
        # another dispatcher wrote the queue since we did: its reasons are not in here
        foreign = self.written_order is not None and last_writer(conn) != self.owner
        full = (
            foreign
            or self.watermark is None
            or self._catalog != (pools, priorities)
            or time.monotonic() - self._last_full > self.full_reload_s
        )
        # taken BEFORE the rows are read: whatever this read misses has an xact >= it
        xmin = int(conn.scalar(XMIN))
        if full:
            q = select(*JOB_COLUMNS).where(JOBS.c.status.in_(LIVE))
        else:
            q = select(*JOB_COLUMNS).where(JOBS.c.xact >= self.watermark)
        rows = conn.execute(q).all()
        if full:
            self.entries = {}
            self.written_order = None
            self._last_full = time.monotonic()
        self._apply(session, rows, full, pools, priorities)
        self.watermark = xmin
        self._catalog = (pools, priorities)
        self.last = RefreshStats(full=full, rows=len(rows), seconds=time.perf_counter() - t0)
        ctx = self._context(now, catalog, config)
        hold_releasing_in_context(session, ctx)  # as build_snapshot does
        return ctx

    def _apply(
        self,
        session: Session,
        rows: Sequence[Any],  # Rows of JOB_COLUMNS, read as JobRows are (job_request)
        full: bool,
        pools: dict[str, PoolInfo],
        priorities: dict[str, PriorityInfo],
    ) -> None:
        live = [r for r in rows if r.status in LIVE]
        for r in rows:
            if r.status not in LIVE:
                self.entries.pop(r.id, None)
        active_ids = [r.id for r in live if r.status in ACTIVE]
        placements, leases = self._holdings(session, active_ids, full)
        preempted: list[int] = []
        for r in live:
            old = self.entries.get(r.id)
            if old is not None and old.revision == r.revision:
                continue  # seen already (a re-read near the watermark)
            if (
                old is not None
                and old.request.preemption_count == r.preemption_count
                and old.request.priority == r.priority
                and old.request.pool == r.pool
                and old.request.longest_attempt_s == r.longest_attempt_s
            ):
                req = old.request  # same spec, same job: skip re-validating it
            else:
                req = job_request(r, priorities, pools)
            entry = JobEntry(
                r.status, r.revision, from_stored(r.reason, r.reason_code), r.queue_position, req
            )
            if r.status in ACTIVE:
                start = r.started_at or r.admitted_at or r.submitted_at
                entry.running = RunningJob(
                    request=req,
                    placements=tuple(placements.get(r.id, ())),
                    started_at=to_epoch(start),
                    leases=tuple(leases.get(r.id, ())),
                )
            elif r.preemption_count:
                preempted.append(r.id)
            self.entries[r.id] = entry
        if preempted:
            reqs = [self.entries[i].request for i in preempted]
            for i, req in zip(
                preempted, with_preemption_history(session, reqs, preempted), strict=True
            ):
                self.entries[i].request = req

    @staticmethod
    def _holdings(
        session: Session, job_ids: list[int], full: bool
    ) -> tuple[dict[int, list[ReplicaPlacement]], dict[int, list[LeaseInfo]]]:
        placements: dict[int, list[ReplicaPlacement]] = defaultdict(list)
        leases: dict[int, list[LeaseInfo]] = defaultdict(list)
        if not job_ids:
            return placements, leases
        aq = (  # live rows only: releasing ones are held apart (app/store/releasing_rows.py)
            live_allocations().order_by(AllocationRow.job_id, AllocationRow.replica)
        )
        lq = select(LeaseRow).where(LeaseRow.state == "active")
        if not full:  # only the changed jobs' rows
            aq = aq.where(AllocationRow.job_id.in_(job_ids))
            lq = lq.where(LeaseRow.job_id.in_(job_ids))
        for a in session.scalars(aq):
            placements[a.job_id].append(placement_of(a))
        for lr in session.scalars(lq):
            leases[lr.job_id].append(lease_info(lr))
        return placements, leases

    def _context(
        self, now: datetime, catalog: Catalog, config: SchedulerConfig
    ) -> SnapshotContext:
        pending: list[JobRequest] = []
        running: list[RunningJob] = []
        revisions: dict[str, int] = {}
        pending_meta: dict[str, tuple[str | None, int | None]] = {}
        for job_id in sorted(self.entries):
            e = self.entries[job_id]
            key = str(job_id)
            revisions[key] = e.revision
            if e.running is not None:
                running.append(e.running)
            else:
                pending.append(e.request)
                pending_meta[key] = (e.reason, e.position)
        snap = catalog.snapshot(now, running, pending, config)
        return SnapshotContext(snapshot=snap, revisions=revisions, pending_meta=pending_meta)

    # after a commit ------------------------------------------------------------

    def queue_written(
        self, rows: list[tuple[int, int, str | None, float | None]], order: list[int] | None,
        at: float = 0.0,
    ) -> None:
        """Reasons (job id, revision, reason, the start it names) and the order the
        dispatcher committed (they take no revision, so the next refresh would not
        re-read them)."""
        for job_id, revision, reason, start in rows:
            e = self.entries.get(job_id)
            if e is not None and e.revision == revision:
                e.reason, e.reason_at, e.start_at = reason, at, start
        if order is not None:
            self.written_order = order

    def start_moved(self, job_id: str, start: float | None, now: float, every: float) -> bool:
        """True when the start a job's unchanged reason names has moved since this picture
        wrote it (or it never wrote one) and the last write is ``every`` seconds old: the
        text "expected start in 52s" can repeat while the instant it means moves on."""
        e = self.entries.get(int(job_id))
        if e is None or start is None and e.start_at is None:
            return False
        if e.reason_at is not None and now - e.reason_at < every:
            return False
        return start is None or e.start_at is None or abs(e.start_at - start) >= 1.0

    def reason_is_fresh(self, job_id: str, old: str, new: str, now: float, every: float) -> bool:
        """True when ``new`` differs from ``old`` only in its numbers and this
        picture wrote the job's reason less than ``every`` seconds ago."""
        e = self.entries.get(int(job_id))
        if e is None or e.reason_at is None or now - e.reason_at >= every:
            return False
        return _DIGITS.sub("#", old) == _DIGITS.sub("#", new)
