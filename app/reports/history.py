"""The dashboard's pictures over time: queue depth, CU allocated per GPU type, and
the wait percentiles of each team, over a window (the last day by default).

Drawn from the jobs' own timestamps, no extra table or sampler: every job that can
matter to a window either is still open (pending, admitted, running: the
``ix_jobs_status_submitted_at`` index) or ended inside it (the partial index on
``finished_at``), so the read grows with the window and what is open now, never
with the whole history (a job that ended before the window changed nothing in it).

Read from the timestamps, so two simplifications, said on the page: a job counts
as waiting from its submit until its last admission (a requeued job's earlier run
counts as waiting), and as holding its CU (``jobs.units``, its last admission's)
from its last admission until it ended.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Float, cast, extract, select, union_all
from sqlalchemy.orm import Session

from app.domain.percentiles import percentile
from app.reports.queries import job_types
from app.store.orm import JobRow

OPEN = ("pending", "admitted", "running")
HOLDING = ("admitted", "running")
POINTS = 48  # points per series: a day in half hours


@dataclass(frozen=True, slots=True)
class Span:
    """One job as the pictures see it (epoch seconds)."""

    team: str
    gpu_type: str
    status: str
    submitted: float
    admitted: float | None
    finished: float | None
    units: float
    wait_s: float


def history_rows(session: Session, now: datetime, window_s: float) -> list[Any]:
    since = now - timedelta(seconds=window_s)
    cols = (
        JobRow.id, JobRow.team, JobRow.status, JobRow.units, JobRow.waited_s,
        cast(extract("epoch", JobRow.submitted_at), Float).label("submitted_s"),
        cast(extract("epoch", JobRow.admitted_at), Float).label("admitted_s"),
        cast(extract("epoch", JobRow.finished_at), Float).label("finished_s"),
    )
    parts = (
        select(*cols).where(JobRow.status.in_(OPEN)),
        select(*cols).where(JobRow.status.not_in(OPEN), JobRow.finished_at >= since),
    )
    return list(session.connection().execute(union_all(*parts)).all())


def spans(session: Session, now: datetime, window_s: float) -> list[Span]:
    rows = history_rows(session, now, window_s)
    types = job_types(session, rows)  # where each job that ran, ran (cached for ended ones)
    out = []
    for r in rows:
        out.append(Span(r.team, types.get(r.id, "-"), r.status, r.submitted_s, r.admitted_s,
                        r.finished_s, float(r.units or 0.0), float(r.waited_s or 0.0)))
    return out


def _waiting_until(s: Span) -> float | None:
    """When the job stopped waiting (None: it still waits)."""
    if s.status == "pending":
        return None
    if s.admitted is not None and s.admitted >= s.submitted:
        return s.admitted
    return s.finished


def series(items: Sequence[Span], now: float, window_s: float,
           points: int = POINTS, teams: Iterable[str] | None = None) -> dict[str, Any]:
    """The three pictures as column arrays (uPlot's data shape): ``t`` (epoch
    seconds), ``queue`` (jobs waiting at each t), ``allocated`` {type: CU at each t},
    ``wait_p50``/``wait_p99`` {team: seconds, of the jobs admitted in the step ending
    at t; None where none was}. ``teams``: only these teams' jobs count (a team
    viewer sees its own)."""
    step = window_s / points
    ts = [now - window_s + step * (i + 1) for i in range(points)]
    keep = set(teams) if teams is not None else None
    queue = [0] * points
    allocated: dict[str, list[float]] = {}
    admitted: dict[str, list[list[float]]] = defaultdict(lambda: [[] for _ in range(points)])
    for s in items:
        if keep is not None and s.team not in keep:
            continue
        until = _waiting_until(s)
        held_from = s.admitted if s.status != "pending" and s.units > 0 else None
        held_to = s.finished if s.status not in HOLDING else None
        for i, t in enumerate(ts):
            if s.submitted <= t and (until is None or until > t):
                queue[i] += 1
            if held_from is not None and held_from <= t and (held_to is None or held_to > t):
                row = allocated.setdefault(s.gpu_type, [0.0] * points)
                row[i] += s.units
        if s.admitted is not None and s.status != "pending" and s.admitted > ts[0] - step:
            # the step (t[i-1], t[i]] it was admitted in
            i = min(points - 1, max(0, math.ceil((s.admitted - (now - window_s)) / step) - 1))
            admitted[s.team][i].append(s.wait_s)
    p50 = {k: [percentile(b, 50) if b else None for b in v] for k, v in admitted.items()}
    p99 = {k: [percentile(b, 99) if b else None for b in v] for k, v in admitted.items()}
    return {
        "t": ts, "step_s": step, "queue": queue,
        "allocated": {k: [round(x, 3) for x in v] for k, v in sorted(allocated.items())},
        "wait_p50": dict(sorted(p50.items())), "wait_p99": dict(sorted(p99.items())),
    }
