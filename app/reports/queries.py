"""The one place reports read the database: job rows -> :class:`JobRecord`.

Everything else in :mod:`app.reports` is pure. A finished job no longer
holds allocation rows, so the GPU type it ran on comes from its last
``admitted`` event (its placements, or the nodes it was placed on mapped
through the node table); a job that never ran is filed under the type it waits for.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict, defaultdict
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    Float,
    any_,
    cast,
    extract,
    literal,
    or_,
    select,
    text,
    union_all,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from app.domain.states import TERMINAL
from app.reports.records import JobRecord
from app.reports.utilization import CPU_ONLY, wanted_type_of
from app.store.live_allocations import live_allocations
from app.store.orm import AllocationRow, JobRow, NodeRow, PoolRow
from app.store.state_changes import wait_seconds

# The columns a report reads per job (not ORM objects: a report touches thousands of
# rows): its timing, its ``resources`` from the spec; the GPU types it holds or held
# are read apart (:func:`_types`).
_COLUMNS = (
    JobRow.id,
    JobRow.team,
    JobRow.pool,
    JobRow.priority,
    JobRow.status,
    JobRow.queued_at,
    JobRow.waited_s,
    # epoch seconds from the database: 25,000 datetime.timestamp() calls were a
    # fifth of a one-day report
    cast(extract("epoch", JobRow.submitted_at), Float).label("submitted_s"),
    cast(extract("epoch", JobRow.admitted_at), Float).label("admitted_s"),
    cast(extract("epoch", JobRow.finished_at), Float).label("finished_s"),
    JobRow.spec["resources"]["gpus"].astext.label("gpus"),
    JobRow.spec["resources"]["gpu_types"][0].astext.label("first_type"),
)


def job_records(session: Session, now: datetime, window_s: float | None) -> list[JobRecord]:
    """Jobs still pending, or with a submit/admit/finish inside the window (all when None).

    The full recomputation: :class:`app.reports.window.WindowRecords` keeps the same
    records between reports and re-reads only the jobs written since.
    """
    rows = window_rows(session, now, window_s)
    return to_records(session, rows, job_types(session, rows), now)


def window_rows(session: Session, now: datetime, window_s: float | None) -> list[Any]:
    """The job rows of :func:`job_records`. With a window they come in four disjoint
    parts, each through its own index (migration 0004): pending; finished since T;
    admitted since T (not finished since); submitted since T (neither). One OR over the
    four made PostgreSQL misjudge the overlap of the conditions and read the whole
    table; this way the cost follows the window, not the history."""
    conn = session.connection()
    if window_s is None:
        return list(conn.execute(select(*_COLUMNS)).all())
    since = now - timedelta(seconds=window_s)
    done = JobRow.status != "pending"
    not_fin = or_(JobRow.finished_at < since, JobRow.finished_at.is_(None))
    not_adm = or_(JobRow.admitted_at < since, JobRow.admitted_at.is_(None))
    parts = (
        select(*_COLUMNS).where(JobRow.status == "pending"),
        select(*_COLUMNS).where(done, JobRow.finished_at >= since),
        select(*_COLUMNS).where(done, not_fin, JobRow.admitted_at >= since),
        select(*_COLUMNS).where(done, not_fin, not_adm, JobRow.submitted_at >= since),
    )
    return list(conn.execute(union_all(*parts)).all())


def changed_rows(session: Session, xact: int) -> list[Any]:
    """The job rows written by transactions from ``xact`` on (``ix_jobs_xact``)."""
    return list(session.connection().execute(select(*_COLUMNS).where(JobRow.xact >= xact)))


def job_types(session: Session, rows: list[Any]) -> dict[int, str]:
    """The GPU type each job that is not pending holds (its live allocations) or ran
    on (an ended job: its last admission); pending jobs are typed by
    :func:`to_records`, from what they wait for."""
    conn = session.connection()
    ids = [r.id for r in rows if r.status != "pending"]
    held: dict[int, set[str]] = defaultdict(set)
    ran_on: dict[int, str] = {}
    if ids:
        for job_id, gpu_type in conn.execute(
            live_allocations(AllocationRow.job_id, AllocationRow.gpu_type).where(
                AllocationRow.job_id == any_(literal(ids, ARRAY(BigInteger)))
            )
        ):
            held[job_id].add(gpu_type or CPU_ONLY)
        # finished jobs: where did they run? (their allocation rows are freed). That
        # never changes once a job ended, so it is kept per database and a report looks
        # up only the jobs that ended since the last one
        known = _ended_cache(conn.engine)
        ended = {r.id: r.submitted_s for r in rows if r.status in TERMINAL}
        with _lock:
            for job_id, sub in ended.items():
                hit = known.get((job_id, sub))
                if hit is not None:
                    ran_on[job_id] = hit
        need = [i for i in ids if i not in held and i not in ran_on]
        if need:
            node_type = dict(conn.execute(select(NodeRow.name, NodeRow.gpu_type)).all())
            for job_id, placed, nodes in conn.execute(_LAST_ADMISSION, {"ids": need}):
                if placed:
                    types = sorted({t or CPU_ONLY for t in placed})
                else:
                    types = sorted({node_type.get(n) or CPU_ONLY for n in nodes or ()})
                if types:
                    ran_on[job_id] = types[0] if len(types) == 1 else "mixed"
            with _lock:
                for job_id in need:
                    if job_id in ended and job_id in ran_on:
                        known[(job_id, ended[job_id])] = ran_on[job_id]
                while len(known) > ENDED_CAP:
                    known.popitem(last=False)
    for job_id, types_held in held.items():
        if job_id not in ran_on:
            types = sorted(types_held)
            ran_on[job_id] = types[0] if len(types) == 1 else "mixed"
    return ran_on


def to_records(
    session: Session, rows: list[Any], types: Mapping[int, str], now: datetime
) -> list[JobRecord]:
    """Rows -> records as of ``now`` (a pending job's wait grows with it); a job
    without an entry in ``types`` is filed under the type it waits for."""
    pools = _pool_types(session)
    wanted: dict[tuple, str] = {}  # pending jobs share a handful of shapes
    out = []
    for r in rows:
        gpu_type = types.get(r.id)
        if gpu_type is None:
            key = (r.gpus, r.first_type, r.pool)
            gpu_type = wanted.get(key) or wanted.setdefault(key, _wanted(*key, pools))
        out.append(_record(r, gpu_type, now))
    return out


def _record(r: Any, gpu_type: str, now: datetime) -> JobRecord:
    # positional: a report builds thousands of these
    return JobRecord(
        str(r.id), r.team, r.pool, r.priority, gpu_type, r.status, r.submitted_s,
        wait_seconds(r, now), r.admitted_s, r.finished_s,
    )


# The GPU types of each job's last admission (its placements; older events name nodes only).
_LAST_ADMISSION = text(
    """
    SELECT DISTINCT ON (job_id) job_id,
        ARRAY(SELECT DISTINCT COALESCE(p ->> 'gpu_type', '')
              FROM jsonb_array_elements(data -> 'placements') AS p) AS placed,
        ARRAY(SELECT jsonb_array_elements_text(data -> 'nodes')) AS nodes
    FROM job_events
    WHERE job_id = ANY(CAST(:ids AS bigint[])) AND to_status = 'admitted'  -- partial index
    ORDER BY job_id, id DESC
    """
)


ENDED_CAP = 200_000  # ended jobs whose GPU type a process remembers, per database
_ended: weakref.WeakKeyDictionary[Engine, OrderedDict[tuple[int, float], str]] = (
    weakref.WeakKeyDictionary()
)
_lock = threading.Lock()


def _ended_cache(engine: Engine) -> OrderedDict[tuple[int, float], str]:
    """(job id, submit time) -> the GPU type an ended job ran on. The submit time is in
    the key because tests restart the id sequence between runs on one database."""
    with _lock:
        cache = _ended.get(engine)
        if cache is None:
            cache = _ended[engine] = OrderedDict()
        return cache


def _pool_types(session: Session) -> dict[str, list[str]]:
    return {n: list(t or ()) for n, t in session.execute(select(PoolRow.name, PoolRow.gpu_types))}


def _wanted(gpus: str | None, first_type: str | None, pool: str, pools: Mapping) -> str:
    return wanted_type_of(gpus == "0", first_type, pools.get(pool, ()))
