"""The dashboard's routes: gather data with the API's own read functions, render HTML.

Open without a token, like ``/docs`` (API.md). Pages refresh themselves
every few seconds; filters are plain GET forms.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import HTMLResponse
from sqlalchemy import select

from app.api.deps import NowDep, SessionDep
from app.api.routes.metrics import metrics_loop
from app.api.schemas import event_out, job_out, lease_out
from app.domain.errors import GpuqError
from app.reports.live import DEFAULT_WINDOW_S, live_fairness, live_utilization
from app.store import catalog
from app.store import jobs as job_store
from app.store.orm import LeaseRow, PoolRow, PriorityClassRow, TeamRow
from app.store.queue_order import queue_page
from app.store.states import wait_seconds
from app.store.usage import pool_usage
from app.tuning.store import current_weights, load_history, load_state
from app.ui import pages
from app.ui.html import esc, page

QUEUE_PAGE = 100  # jobs per queue page

router = APIRouter(prefix="/ui", tags=["dashboard"], include_in_schema=False)


def _html(body: str, status_code: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status_code)


def _error(title: str, e: GpuqError) -> HTMLResponse:
    return _html(
        page(title, "", f'<div class="alert">{esc(e.detail)}</div>', refresh_s=None),
        e.status_code,
    )


@router.get("", response_class=HTMLResponse)
def overview(request: Request, session: SessionDep, now: NowDep) -> HTMLResponse:
    snap = metrics_loop(request).snapshot(now)
    util = live_utilization(session, snap, request.app.state.settings.prometheus_url)
    return _html(pages.overview_page(util, load_state(session)["config"]))


@router.get("/queue", response_class=HTMLResponse)
def queue(
    session: SessionDep, now: NowDep, pool: str | None = None, cursor: str | None = None
) -> HTMLResponse:
    try:
        rows, first, next_cursor = queue_page(
            session.connection(), limit=QUEUE_PAGE, cursor=cursor or None, pool=pool or None
        )
    except GpuqError as e:
        return _error("Queue", e)
    items = [
        {
            "position": first + i,
            "id": str(j.id),
            "name": j.name,
            "team": j.team,
            "pool": j.pool,
            "priority": j.priority,
            "wait_seconds": wait_seconds(j, now),
            "reason": j.reason,
        }
        for i, j in enumerate(rows)
    ]
    pools = [r.name for r in catalog.list_named(session, PoolRow)]
    return _html(pages.queue_page(items, pool=pool, pools=pools, next_cursor=next_cursor))


@router.get("/pools", response_class=HTMLResponse)
def pools(session: SessionDep) -> HTMLResponse:
    pool_rows = catalog.list_named(session, PoolRow)
    data = [{**catalog.pool_dict(r), "usage": pool_usage(session, r)} for r in pool_rows]
    leases = [
        jsonable_encoder(lease_out(r))
        for r in session.scalars(
            select(LeaseRow).where(LeaseRow.state == "active").order_by(LeaseRow.id)
        )
    ]
    return _html(pages.pools_page(data, leases))


@router.get("/fairness", response_class=HTMLResponse)
def fairness(
    session: SessionDep,
    now: NowDep,
    window_s: Annotated[float, Query(gt=0, le=366 * 86400)] = DEFAULT_WINDOW_S,
) -> HTMLResponse:
    return _html(pages.fairness_page(live_fairness(session, now, window_s)))


@router.get("/jobs", response_class=HTMLResponse)
def jobs(
    session: SessionDep,
    now: NowDep,
    team: str | None = None,
    pool: str | None = None,
    status: str | None = None,
    priority: str | None = None,
    cursor: str | None = None,
) -> HTMLResponse:
    filters = {
        "team": team or None,
        "pool": pool or None,
        "status": status or None,
        "priority": priority or None,
    }
    try:
        rows, next_cursor = job_store.list_jobs(
            session, limit=100, cursor=cursor or None, **filters
        )
    except GpuqError as e:
        return _error("Jobs", e)
    items = [jsonable_encoder(job_out(r, now)) for r in rows]
    return _html(
        pages.jobs_page(
            items,
            filters=filters,
            teams=[r.name for r in catalog.list_named(session, TeamRow)],
            pools=[r.name for r in catalog.list_named(session, PoolRow)],
            priorities=[r.name for r in catalog.list_named(session, PriorityClassRow)],
            next_cursor=next_cursor,
        )
    )


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job(job_id: str, session: SessionDep, now: NowDep) -> HTMLResponse:
    try:
        row = job_store.get_job(session, job_id)
    except GpuqError as e:
        return _error(f"Job {job_id}", e)
    lease = job_store.active_lease(session, row)
    released = job_store.released_placements(session, row)
    body = jsonable_encoder(job_out(row, now, lease, released))
    events = [jsonable_encoder(event_out(e)) for e in job_store.job_events(session, row)]
    return _html(pages.job_page(body, events))


@router.get("/tuning", response_class=HTMLResponse)
def tuning(session: SessionDep) -> HTMLResponse:
    state = {**load_state(session), "weights": current_weights(session)}
    history = list(reversed(load_history(session)))[:200]
    return _html(pages.tuning_page(state, history))
