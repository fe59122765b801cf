"""Estimated start times for the API and the dashboard: one cached forward replay.

:func:`app.simulate.estimate.estimate_starts` replays the live snapshot through
the core; this module decides when. A request that finds the last result older
than ``GPUQ_ESTIMATE_INTERVAL`` seconds (default 30) starts ONE background
refresh and answers from the previous result at once, so no request waits for
a replay and at most one runs at a time. A pending job that joined the queue after the
last replay (submitted, or requeued by a preemption) has no estimate in it: asking for
that job starts the refresh early, once the last result is ``NEW_JOB_REFRESH_S`` old, so
a requeued job shows its new start within seconds, not after up to a whole interval,
while a steady stream of submissions still costs at most one replay per
``NEW_JOB_REFRESH_S``. Running jobs without a
``duration_estimate_s`` are assumed to take their pool's median run time of
the last week (one aggregate over the jobs that succeeded), or an hour.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import Depends, FastAPI, Request
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.scheduling.policies import get_policy
from app.simulate.estimate import StartEstimates, estimate_starts
from app.store.orm import JobRow
from app.store.snapshot import build_snapshot

log = logging.getLogger(__name__)

HISTORY = timedelta(days=7)
#: a job queued after the last replay asks for a new one once that replay is this old (s):
#: a replay of a 10,000-job backlog costs about 1.5 s (docs/benchmarks.md), so this bounds
#: the early refreshes to a fraction of one core however many jobs arrive
NEW_JOB_REFRESH_S = 5.0


def pool_default_runtimes(session: Session, now: datetime) -> dict[str, float]:
    """Median run time (s) of each pool's jobs that succeeded in the last week."""
    run_s = func.extract("epoch", JobRow.finished_at - JobRow.started_at)
    rows = session.execute(
        select(JobRow.pool, func.percentile_cont(0.5).within_group(run_s))
        .where(
            JobRow.status == "succeeded",
            JobRow.finished_at >= now - HISTORY,
            JobRow.started_at.is_not(None),
        )
        .group_by(JobRow.pool)
    )
    return {pool: float(m) for pool, m in rows if m is not None and m > 0}


class StartEstimator:
    """The last :class:`StartEstimates`, refreshed in the background when stale."""

    def __init__(
        self,
        session_factory: sessionmaker,
        clock: Callable[[], datetime],
        interval_s: float = 30.0,
        background: bool = True,
        sim_speed: float = 1.0,
    ) -> None:
        self.session_factory = session_factory
        self.clock = clock
        self.interval_s = interval_s
        # False (an app without its loops, as in most tests): only refresh() computes, so
        # no thread reads the tables behind a test's back
        self.background = background
        self.sim_speed = sim_speed  # the simulated cluster's GPUQ_SIM_SPEED (1: Kubernetes)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.last: StartEstimates | None = None

    def refresh(self) -> StartEstimates:
        """Replay now (the background thread's work; tests call it directly)."""
        now = self.clock()
        with self.session_factory() as session:
            ctx = build_snapshot(session, now)
            defaults = pool_default_runtimes(session, now)
        est = estimate_starts(ctx.snapshot, get_policy("gpuq"), default_runtime_s=defaults,
                              sim_speed=self.sim_speed)
        self.last = est
        return est

    def _run(self) -> None:
        try:
            self.refresh()
        except Exception:  # a failed refresh keeps the old estimates; the next request retries
            log.exception("estimating start times failed")
        finally:
            self._thread = None

    def current(self) -> StartEstimates | None:
        last = self.last
        if last is None or self.clock().timestamp() - last.computed_at >= self.interval_s:
            self._refresh_in_background()
        return last

    def _refresh_in_background(self) -> None:
        """Start the one background refresh unless it runs already (or loops are off)."""
        if not self.background:
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="gpuq-estimates", daemon=True
                )
                self._thread.start()

    def starts(self, now: datetime) -> Callable[..., datetime | None]:
        """A lookup ``(job id, the start its reason names, when it joined the queue) ->
        estimated start``.

        The start the job's pending reason names (``jobs.reason_start_at``: a reservation's
        expected start, a preemption the preemptor would make) comes first: it is the last
        cycle's own verdict and what the reason beside it says, so the queue never shows
        "-" next to "expected start in 52s". Else the current replay's estimate. A start
        in the past (the estimates are up to ``interval_s`` old) reads "now". A job without
        an estimate that joined the queue (``queued_at``) after the replay asks for an early
        refresh (``NEW_JOB_REFRESH_S``): the replay could not know it."""
        est = self.current()

        def start_of(
            job_id: str,
            reason_start: datetime | None = None,
            queued_at: datetime | None = None,
        ) -> datetime | None:
            if reason_start is not None:
                return max(reason_start.replace(microsecond=0), now)
            t = est.get(job_id) if est is not None else None
            if t is None:
                if (est is not None and queued_at is not None
                        and queued_at.timestamp() > est.computed_at
                        and now.timestamp() - est.computed_at >= NEW_JOB_REFRESH_S):
                    self._refresh_in_background()
                return None
            return max(datetime.fromtimestamp(round(t), UTC), now)

        return start_of


def get_estimator(request: Request) -> StartEstimator:
    """One estimator per app, made on first use from the app's own session factory and clock."""
    return estimator_for(request.app)


def estimator_for(app: FastAPI) -> StartEstimator:
    """The app's one estimator (the API, the dashboard and the Kubernetes front door's
    ``gpuq.io/estimated-start`` read the same estimates)."""
    state = app.state
    est = getattr(state, "estimator", None)
    if est is None:
        est = StartEstimator(
            state.session_factory,
            state.clock,
            state.settings.estimate_interval_s,
            background=state.settings.run_loops,
            sim_speed=(state.settings.sim_speed if state.settings.cluster == "simulated"
                       else 1.0),
        )
        state.estimator = est
    return est


EstimatorDep = Annotated[StartEstimator, Depends(get_estimator)]
