"""Keeping the Prometheus metrics current.

- :class:`MetricsLoop` recomputes the gauges from the database (the same
  snapshot the dispatcher schedules from) and feeds the wait / completion
  histograms from job rows changed since its last pass (by the monotonic
  ``revision`` column): the wait of each queueing episode at admission
  (so the sum is every second pending, across requeues) and the JCT once
  at a successful finish. ``/metrics`` calls :meth:`MetricsLoop.refresh`, so a scrape
  is current in every process shape (``serve`` or ``api``), loops or not.
  Preemptions and lease reclaims are counted from the ``preempted`` /
  ``reclaimed`` job events, whichever loop wrote them.
- :class:`MeteredDispatcher` is the dispatcher plus cycle metrics: time per
  pass, attempts, failure reasons (these exist in the process that runs the
  dispatcher, i.e. ``gpuq serve``).
"""

from __future__ import annotations

import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session, sessionmaker

from app.clock import utcnow
from app.dispatch.base import LoopService
from app.dispatch.dispatcher import Dispatcher
from app.dispatch.picture import XMIN
from app.metrics import GpuqMetrics
from app.reports.alerts import Alert
from app.reports.live import live_fairness, live_utilization
from app.reports.utilization import borrowed_units, pending_counts, utilization
from app.store.orm import JobEventRow, JobRow
from app.store.releasing import releasing_units

SEEN_CAP = 200_000


class MetricsLoop(LoopService):
    name = "metrics"

    def __init__(
        self,
        session_factory: sessionmaker[Session],
        metrics: GpuqMetrics,
        *,
        clock: Callable[[], datetime] = utcnow,
        interval: float = 15.0,
        prometheus_url: str | None = None,
        fairness_window_s: float = 3600.0,
        backfill_s: float = 24 * 3600.0,
    ) -> None:
        super().__init__(interval)
        self.session_factory = session_factory
        self.metrics = metrics
        self.clock = clock
        self.prometheus_url = prometheus_url
        self.fairness_window_s = fairness_window_s
        self.backfill_s = backfill_s
        self.last_revision: int | None = None
        self.last_xmin: int | None = None
        self.last_event_id: int | None = None
        self._seen: OrderedDict[tuple[int, str, float], None] = OrderedDict()
        self._waited: OrderedDict[int, float] = OrderedDict()  # job -> wait already observed
        self._lock = threading.Lock()
        self._last_pass: float | None = None

    def refresh(self, max_age_s: float = 5.0) -> None:
        """Run a pass unless one finished less than ``max_age_s`` ago (scrapes call this)."""
        if self._last_pass is not None and time.monotonic() - self._last_pass < max_age_s:
            return
        self.run_once()

    def run_once(self) -> None:
        with self._lock, self.session_factory() as session:
            try:
                now = self.clock()
                self._gauges(session, now)
                self._histograms(session, now)
                self._stops(session, now)
            except Exception:
                self.metrics.metrics_pass_errors.inc()
                raise
            finally:
                self._last_pass = time.monotonic()

    def _gauges(self, session: Session, now: datetime) -> None:
        snap, util = live_utilization(session, now, self.prometheus_url)
        gpu_util = {
            r["gpu_type"]: r["gpu_util"] for r in util["gpu_types"] if r["gpu_util"] is not None
        }
        rows = utilization(snap, gpu_util if util.get("gpu_util_source") else None)
        self.metrics.record_utilization(
            rows, {name: t.weight for name, t in snap.gpu_types.items()}
        )
        self.metrics.record_pending(pending_counts(snap))
        lease_counts: Counter[tuple[str, str, str]] = Counter()
        for job in snap.running:
            for lease in job.leases:
                lease_counts[(lease.borrower, lease.lender, lease.gpu_type)] += 1
        self.metrics.record_leases(lease_counts, borrowed_units(snap))
        self.metrics.record_releasing(releasing_units(session))
        fair = live_fairness(session, now, self.fairness_window_s)
        alerts = [_alert(a) for a in (*util["alerts"], *fair["alerts"])]
        self.metrics.record_alerts(alerts)

    def _histograms(self, session: Session, now: datetime) -> None:
        # rows written by transactions that had not finished at the last look
        # (jobs.xact, as the dispatcher's picture reads them): "revision > last"
        # would skip a row whose writer took its revision early and committed late;
        # rows seen twice are harmless (self._first)
        xmin = int(session.scalar(XMIN))
        q = select(JobRow).order_by(JobRow.revision)
        if self.last_revision is None or self.last_xmin is None:
            since = now - timedelta(seconds=self.backfill_s)
            q = q.where(or_(JobRow.admitted_at >= since, JobRow.finished_at >= since))
        else:
            q = q.where(JobRow.xact >= self.last_xmin)
        self.last_xmin = xmin
        for job in session.scalars(q):
            self.last_revision = max(self.last_revision or 0, job.revision)
            if job.admitted_at is not None and self._first(job.id, "admit", job.admitted_at):
                # one observation per queueing episode: the wait since the previous admission
                total = job.waited_s or 0.0
                before = self._waited.get(job.id, 0.0)
                self._waited[job.id] = total
                self._waited.move_to_end(job.id)
                self.metrics.observe_wait(job.pool, job.priority, job.team, total - before)
            if (
                job.status == "succeeded"
                and job.finished_at is not None
                and self._first(job.id, "finish", job.finished_at)
            ):
                jct = (job.finished_at - job.submitted_at).total_seconds()
                self.metrics.observe_completion(job.pool, job.priority, job.team, jct)
        if self.last_revision is None:
            self.last_revision = 0

    def _stops(self, session: Session, now: datetime) -> None:
        """Preemptions and lease reclaims from the job events written since the last pass."""
        q = select(JobEventRow.id, JobEventRow.type, JobEventRow.reason).where(
            JobEventRow.type.in_(("preempted", "reclaimed"))
        )
        if self.last_event_id is None:
            q = q.where(JobEventRow.at >= now - timedelta(seconds=self.backfill_s))
        else:
            q = q.where(JobEventRow.id > self.last_event_id)
        last = self.last_event_id or 0
        for event_id, kind, reason in session.execute(q.order_by(JobEventRow.id)):
            self.metrics.record_stop(kind, reason)
            last = max(last, event_id)
        self.last_event_id = last

    def _first(self, job_id: int, kind: str, at: datetime) -> bool:
        key = (job_id, kind, at.timestamp())
        if key in self._seen:
            return False
        self._seen[key] = None
        while len(self._seen) > SEEN_CAP:
            self._seen.popitem(last=False)
        while len(self._waited) > SEEN_CAP:
            self._waited.popitem(last=False)
        return True


def _alert(d: dict[str, Any]) -> Alert:
    return Alert(
        type=d["type"],
        message=d.get("message", ""),
        figures=d.get("figures") or {},
        dimension=d.get("dimension"),
        key=d.get("key"),
    )


class MeteredDispatcher(Dispatcher):
    """The dispatcher, recording each pass's figures into :class:`GpuqMetrics`."""

    def __init__(self, *args: Any, metrics: GpuqMetrics, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.metrics = metrics

    def run_once(self) -> None:
        self.last_result = None
        t0 = time.perf_counter()
        super().run_once()
        result = self.last_result
        if result is None:  # not the leader this pass
            return
        # preemptions and reclaims are counted from job events by the MetricsLoop, so
        # those of the descheduler and the lease reaper count too, in any process
        self.metrics.record_cycle(
            seconds=time.perf_counter() - t0,
            admitted=len(result.admissions),
            reasons=result.reasons,
            unschedulable=result.unschedulable,
        )
