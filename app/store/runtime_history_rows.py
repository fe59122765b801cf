"""The run-time history in PostgreSQL: one row per (team, request class).

The rule (what a class is, how a run updates its summary, what it predicts) is
:mod:`app.domain.runtime_history`, shared with the simulator; this module only
keeps the summary. :func:`record_succeeded` runs in the transaction that marks
jobs ``succeeded`` (:func:`app.store.state_changes.apply_changes`), so a run is counted
exactly once; :func:`read_history` reads the whole table (bounded by teams x
classes) for the dispatcher's snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Connection, Row, select, text
from sqlalchemy.orm import Session

from app.domain.runtime_history import RunStats, RuntimeHistory, key
from app.domain.spec import JobSpec
from app.domain.spec_to_request import request_from_spec
from app.scheduling.model import PriorityInfo
from app.store.orm import RuntimeHistoryRow

_SPECS = text("SELECT id, spec FROM jobs WHERE id = ANY(CAST(:ids AS bigint[]))")
_LOCK = text(
    "SELECT team, request_class, runs, mean_log FROM runtime_history"
    " WHERE (team, request_class) IN (SELECT * FROM unnest(CAST(:teams AS text[]),"
    " CAST(:classes AS text[]))) ORDER BY team, request_class FOR UPDATE"
)
_UPSERT = text(
    "INSERT INTO runtime_history (team, request_class, runs, mean_log, updated_at)"
    " SELECT * , CAST(:now AS timestamptz) FROM unnest(CAST(:teams AS text[]),"
    " CAST(:classes AS text[]), CAST(:runs AS integer[]), CAST(:means AS float8[]))"
    " ON CONFLICT (team, request_class) DO UPDATE SET runs = EXCLUDED.runs,"
    " mean_log = EXCLUDED.mean_log, updated_at = EXCLUDED.updated_at"
)


def record_succeeded(conn: Connection, rows: Sequence[Row], now: datetime) -> None:
    """Add the runs of jobs that just succeeded (``rows``: :func:`apply_changes`'s rows,
    with ``started_at`` and ``finished_at``) to their teams' summaries."""
    runs = [(r.id, (r.finished_at - r.started_at).total_seconds()) for r in rows
            if r.started_at is not None and r.finished_at is not None]
    if not runs:
        return
    specs: dict[int, dict] = {
        job_id: spec for job_id, spec in conn.execute(_SPECS, {"ids": [i for i, _ in runs]})}
    prio = PriorityInfo("P1", 0, True)
    done = []
    for job_id, run_s in runs:
        spec = specs.get(job_id)
        if spec is None:
            continue
        req = request_from_spec(JobSpec.model_validate(spec), job_id=str(job_id), pool="",
                                priority=prio, submitted_at=0.0)
        done.append((req, run_s))
    wanted = sorted({key(req) for req, _ in done})
    if not wanted:
        return
    history = RuntimeHistory({
        (t, c): RunStats(n, m) for t, c, n, m in conn.execute(_LOCK, {
            "teams": [t for t, _ in wanted], "classes": [c for _, c in wanted]})
    })
    for req, run_s in done:
        history.record(req, run_s)
    conn.execute(_UPSERT, {
        "now": now, "teams": [t for t, _ in wanted], "classes": [c for _, c in wanted],
        "runs": [history.stats[k].runs for k in wanted],
        "means": [history.stats[k].mean_log for k in wanted],
    })


def read_history(session: Session) -> RuntimeHistory:
    """The whole summary (bounded by teams x request classes)."""
    return RuntimeHistory({
        (r.team, r.request_class): RunStats(r.runs, r.mean_log)
        for r in session.scalars(select(RuntimeHistoryRow))
    })
