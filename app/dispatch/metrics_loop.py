"""Keeping the Prometheus metrics current.

- :class:`MetricsLoop` sets the gauges from live state only: its own
  :class:`~app.dispatch.picture.QueuePicture` of the live jobs (the dispatcher's
  incremental picture: each pass re-reads only the job rows written since the
  last one), leases, releasing capacity, team usage and quotas, and
  the head-of-line alert over the last hour (a windowed, indexed read). It
  feeds the wait / completion histograms and the preemption / reclaim
  counters from the job events committed since its last pass
  (:class:`~app.reports.event_feed.EventFeed`): the wait of each queueing
  episode at admission (so the sum is every second pending, across
  requeues) and the JCT once at a successful finish, whichever loop or
  process wrote the event. Nothing here reads the whole job history, so a
  pass costs what changed. ``/metrics`` calls :meth:`MetricsLoop.refresh`, so a
  scrape is current in every process shape (``serve`` or ``api``), loops or not.
- :class:`MeteredDispatcher` is the dispatcher plus cycle metrics: time per
  pass, attempts, failure reasons (these exist in the process that runs the
  dispatcher, i.e. ``gpuq serve``).
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from app.clock import utcnow
from app.dispatch.dispatcher import Dispatcher
from app.dispatch.loops import LoopService
from app.dispatch.picture import QueuePicture
from app.metrics import GpuqMetrics
from app.reports.alerts import Alert
from app.reports.event_feed import EventFeed
from app.reports.live import live_fairness, live_utilization
from app.reports.utilization import TypeUtilization, borrowed_units, pending_counts
from app.reports.window import WindowRecords
from app.scheduling.model import Snapshot
from app.scheduling.verdicts import from_stored
from app.store.releasing_rows import releasing_units


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
        alerts_every_s: float = 60.0,
    ) -> None:
        super().__init__(interval)
        self.session_factory = session_factory
        self.metrics = metrics
        self.clock = clock
        self.prometheus_url = prometheus_url
        self.fairness_window_s = fairness_window_s
        self.backfill_s = backfill_s
        self.alerts_every_s = alerts_every_s
        self._hol: tuple[float, list[dict[str, Any]]] | None = None  # (when, alerts)
        self.feed = EventFeed()
        # the live jobs, refreshed by the rows changed since the last look (as the
        # dispatcher's own picture is); a full re-read at most hourly as a safety net
        self.picture = QueuePicture(full_reload_s=3600.0)
        # the recent jobs of the fairness reports (this loop's head-of-line alert, the
        # report routes and the dashboard of this app), refreshed by what changed
        self.window = WindowRecords()
        self._lock = threading.Lock()
        self._last_pass: float | None = None

    def refresh(self, max_age_s: float = 5.0) -> None:
        """Run a pass unless one finished less than ``max_age_s`` ago (scrapes call this)."""
        if self._last_pass is not None and time.monotonic() - self._last_pass < max_age_s:
            return
        self.run_once()

    def snapshot(self, now: datetime) -> Snapshot:
        """The live cluster and queue as of now, refreshed by what changed (for the
        utilization report and the dashboard, which would otherwise rebuild it)."""
        with self._lock, self.session_factory() as session:
            return self._snapshot(session, now)

    def _snapshot(self, session: Session, now: datetime) -> Snapshot:
        try:
            # stopping Pods still hold their cards: the refresh marks them (once; a
            # second marking here added their CPU, memory and card shares twice)
            ctx = self.picture.refresh(session, now)
        except Exception:
            self.picture.invalidate()
            raise
        return ctx.snapshot

    def run_once(self) -> None:
        with self._lock, self.session_factory() as session:
            try:
                now = self.clock()
                self._gauges(session, now)
                self._events(session, now)
            except Exception:
                self.metrics.metrics_pass_errors.inc()
                raise
            # only a pass that worked is reused: after a failure the next scrape
            # tries again (and fails while the database is down) instead of
            # serving the values of before the failure
            self._last_pass = time.monotonic()

    def _gauges(self, session: Session, now: datetime) -> None:
        snap = self._snapshot(session, now)
        counts = pending_counts(snap)  # once: the report and the gauge both use it
        util = live_utilization(session, snap, self.prometheus_url, counts)
        rows = [TypeUtilization(**r) for r in util["gpu_types"]]  # as the report computed
        self.metrics.record_utilization(
            rows, {name: t.weight for name, t in snap.gpu_types.items()}
        )
        self.metrics.record_pending(counts)
        lease_counts: Counter[tuple[str, str, str]] = Counter()
        for job in snap.running:
            for lease in job.leases:
                lease_counts[(lease.borrower, lease.lender, lease.gpu_type)] += 1
        self.metrics.record_leases(lease_counts, borrowed_units(snap))
        usage: defaultdict[tuple[str, str], float] = defaultdict(float)
        for job in snap.running:
            for p in job.placements:
                if p.gpu_type:
                    usage[(job.request.team, p.gpu_type)] += p.units
        self.metrics.record_teams(
            usage,
            {name: t.quota_units for name, t in snap.teams.items()},
            {(n, g): cap for n, t in snap.teams.items() for g, cap in t.quota_by_type.items()},
        )
        self.metrics.record_releasing(releasing_units(session))
        clock = time.monotonic()
        if self._hol is None or clock - self._hol[0] >= self.alerts_every_s:
            # the head-of-line alert reads an hour of jobs (and every pending one):
            # at most once a minute, not per scrape (alert rules wait minutes anyway)
            self._hol = (clock, live_fairness(
                session, now, self.fairness_window_s, self.window
            )["alerts"])
        alerts = [_alert(a) for a in (*util["alerts"], *self._hol[1])]
        self.metrics.record_alerts(alerts)

    def _events(self, session: Session, now: datetime) -> None:
        """Histograms and stop counters from the job events committed since the last pass."""
        for ev in self.feed.read(session, now - timedelta(seconds=self.backfill_s)):
            if ev.kind == "admit" and ev.wait_s is not None:
                self.metrics.observe_wait(ev.pool, ev.priority, ev.team, ev.wait_s)
            elif ev.kind == "finish":
                self.metrics.observe_completion(ev.pool, ev.priority, ev.team, ev.jct_s)
            elif ev.kind == "stop":
                self.metrics.record_stop(ev.type, from_stored(ev.reason, ev.reason_code))


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
