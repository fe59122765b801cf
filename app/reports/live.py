"""Reports on the live system: utilization of a live snapshot, fairness over a window.

Shared by the report routes, the dashboard, the metrics loop and the
tuner loop, so all of them show the same numbers for the same moment.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from app.reports.alerts import AlertThresholds
from app.reports.dcgm import fetch_gpu_util
from app.reports.fairness import fairness_report
from app.reports.queries import job_records
from app.reports.utilization import utilization_report
from app.reports.window import WindowRecords
from app.scheduling.model import Snapshot
from app.store.config_loader import scheduler_knobs

log = logging.getLogger("gpuq.reports")

DEFAULT_WINDOW_S = 24 * 3600.0


def thresholds(session: Session) -> AlertThresholds:
    """``scheduler.alerts`` in the config file; defaults otherwise (bad keys are logged)."""
    try:
        return AlertThresholds.from_mapping(scheduler_knobs(session).get("alerts"))
    except (TypeError, ValueError) as e:
        log.warning("ignoring scheduler.alerts: %s", e)
        return AlertThresholds()


def gpu_util_for(snap: Snapshot, prometheus_url: str | None) -> dict[str, float] | None:
    """DCGM utilization per type, or None (unset URL, or Prometheus unreachable: logged)."""
    if not prometheus_url:
        return None
    try:
        return fetch_gpu_util(prometheus_url, {n.name: n.gpu_type for n in snap.nodes})
    except Exception as e:  # network, HTTP or shape errors: report "unknown", never guess
        log.warning("DCGM utilization from %s unavailable: %s", prometheus_url, e)
        return None


def live_utilization(
    session: Session,
    snap: Snapshot,
    prometheus_url: str | None = None,
    counts: Mapping[tuple[str, str, str], int] | None = None,
) -> dict[str, Any]:
    """The utilization report of ``snap`` (the live picture: see
    :meth:`app.dispatch.metrics_loop.MetricsLoop.snapshot`, which refreshes it by what changed)."""
    util = gpu_util_for(snap, prometheus_url)
    body = utilization_report(
        snap,
        util,
        thresholds=thresholds(session),
        gpu_util_source=prometheus_url if util is not None else None,
        counts=counts,
    )
    if prometheus_url and util is None:
        body["gpu_util_note"] = f"real GPU utilization unknown: {prometheus_url} did not answer"
    return body


def live_fairness(
    session: Session, now: datetime, window_s: float | None, window: WindowRecords | None = None,
    team: str | None = None,
) -> dict[str, Any]:
    """The fairness report as of now; ``window`` (the app's, kept by its metrics loop)
    re-reads only the jobs written since its last report, with the same result.
    ``team``: that team's jobs only (a team token's report: its waits by pool, priority
    and GPU type, and its alerts, with nothing of another team's)."""
    if window is not None:
        records = window.records(session, now, window_s)
    else:
        records = job_records(session, now, window_s)
    if team is not None:
        records = [r for r in records if r.team == team]
    return fairness_report(
        records, now=now.timestamp(), window_s=window_s, thresholds=thresholds(session)
    )
