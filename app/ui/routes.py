"""The dashboard's routes: gather data with the API's own read functions, render a template.

Every page needs a token (header or the login cookie) unless the operator
opened the dashboard read-only with ``GPUQ_UI_PUBLIC=true`` (see
:mod:`app.ui.auth`); a team token sees only its team's jobs. Pages refresh
themselves every few seconds; filters are plain GET forms; the one write
(cancel) is a POST form carrying a per-token CSRF key.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from sqlalchemy import select

from app.api.deps import NowDep, SessionDep, Unauthorized
from app.api.estimates import EstimatorDep, StartEstimator
from app.api.routes.jobs import cancel_job as api_cancel_job
from app.api.routes.metrics import metrics_loop
from app.api.schemas import event_out, job_out, lease_out
from app.domain.errors import Forbidden, GpuqError
from app.domain.states import CANCELLABLE, STATUSES
from app.reports.history import series, spans
from app.reports.live import DEFAULT_WINDOW_S, live_fairness, live_utilization
from app.store import catalog
from app.store import jobs as job_store
from app.store.job_refs import JobRefs
from app.store.orm import JobRow, LeaseRow, PoolRow, PriorityClassRow, TeamRow
from app.store.queue_order import queue_page
from app.store.state_changes import wait_seconds
from app.store.usage import pool_usage
from app.tuning.store import current_weights, load_history, load_state
from app.ui import docs, views
from app.ui.auth import (
    COOKIE,
    FormDep,
    LoginRequired,
    Viewer,
    ViewerDep,
    login_redirect,
    principal_for,
    safe_next,
)
from app.ui.format import when
from app.ui.render import STATIC_DIR, render

QUEUE_PAGE = 100  # jobs per queue page

router = APIRouter(prefix="/ui", tags=["dashboard"], include_in_schema=False)


def install(app: FastAPI) -> None:
    """Routes, the stylesheet, the off-line API docs and the login redirect on ``app``."""
    app.include_router(router)
    app.include_router(docs.router)
    app.mount("/ui/static", StaticFiles(directory=STATIC_DIR), name="ui-static")
    app.add_exception_handler(LoginRequired, login_redirect)  # type: ignore[arg-type]


def _error(request: Request, title: str, e: GpuqError) -> HTMLResponse:
    return render(
        request,
        "error.html",
        title=title,
        detail=e.detail,
        status_code=e.status_code,
        refresh_s=None,
    )


# -- login -------------------------------------------------------------------


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, next: str = "/ui", error: str | None = None) -> HTMLResponse:
    return render(
        request,
        "login.html",
        title="Log in",
        refresh_s=None,
        next=safe_next(next),
        error="that token is unknown, expired or revoked" if error else None,
    )


@router.post("/login", response_model=None)
def login(request: Request, session: SessionDep, form: FormDep) -> Response:
    token = form.get("token", "").strip()
    target = safe_next(form.get("next"))
    try:
        principal_for(request, session, token)
    except Unauthorized:
        return render(
            request,
            "login.html",
            title="Log in",
            refresh_s=None,
            next=target,
            error="that token is unknown, expired or revoked",
            status_code=401,
        )
    except Forbidden as e:  # a metrics token: GET /metrics only, never the dashboard
        return render(request, "login.html", title="Log in", refresh_s=None, next=target,
                      error=e.detail, status_code=403)
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        COOKIE,
        token,
        path="/ui",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@router.post("/logout")
def logout(viewer: ViewerDep, form: FormDep) -> RedirectResponse:
    response = RedirectResponse("/ui/login", status_code=303)
    if viewer.check_csrf(form.get("csrf")):
        response.delete_cookie(COOKIE, path="/ui")
    return response


# -- pages -------------------------------------------------------------------


@router.get("", response_class=HTMLResponse)
def overview(request: Request, session: SessionDep, now: NowDep, viewer: ViewerDep) -> HTMLResponse:
    snap = metrics_loop(request).snapshot(now)
    util = live_utilization(session, snap, request.app.state.settings.prometheus_url)
    return render(
        request,
        "overview.html",
        title="GPU types",
        active="/ui",
        util=util,
        tuning=load_state(session)["config"],
    )


@router.get("/queue", response_class=HTMLResponse)
def queue(
    request: Request,
    session: SessionDep,
    now: NowDep,
    viewer: ViewerDep,
    estimator: EstimatorDep,
    pool: str | None = None,
    team: str | None = None,
    cursor: str | None = None,
) -> HTMLResponse:
    rows: list[Any]  # queue_page's rows
    try:
        if team and not viewer.may_see(team):
            # as GET /v1/queue: nothing of another team, not even how many it has
            rows, first, next_cursor = [], 1, None
        else:
            rows, first, next_cursor = queue_page(
                session.connection(),
                limit=QUEUE_PAGE,
                cursor=cursor or None,
                pool=pool or None,
                team=team or None,
            )
    except GpuqError as e:
        return _error(request, "Queue", e)
    start_of = estimator.starts(now)
    refs = JobRefs(session, viewer.team, [j.reason for j in rows])
    items = [
        {
            "position": first + i,
            "id": str(j.id),
            "name": j.name,
            "team": j.team,
            "pool": j.pool,
            "priority": j.priority,
            "wait_seconds": wait_seconds(j, now),
            "reason": refs.text(j.reason),
            "reason_code": j.reason_code,
            "estimated_start": start_of(str(j.id), j.reason_start_at, j.queued_at),
        }
        for i, j in enumerate(rows)
    ]
    for q in items:
        if q["estimated_start"] is not None:
            q["estimated_start_in_s"] = (q["estimated_start"] - now).total_seconds()
    shown, hidden = views.hide_others(items, viewer.may_see)
    if items and (first != 1 or next_cursor):
        shown_range = f"#{first}-{items[-1]['position']} of the pending jobs"
    else:
        shown_range = f"{len(items)} pending"
    title = f"Queue ({shown_range})" + (f" · pool {pool}" if pool else "")
    title += f" · team {team}" if team else ""
    query = {k: v for k, v in (("pool", pool), ("team", team)) if v}
    next_url = f"/ui/queue?{urlencode({**query, 'cursor': next_cursor})}" if next_cursor else None
    est = estimator.last
    note = (
        f"estimated starts replay the queue through the scheduler as of "
        f"{when(est.computed_at)} (refreshed at most every {estimator.interval_s:g} s); "
        "'unknown' = beyond the replay's bounds"
        if est is not None
        else "estimated starts are being computed"
    )
    return render(
        request,
        "queue.html",
        title=title,
        active="/ui/queue",
        items=shown,
        hidden=hidden,
        pools=[r.name for r in catalog.list_named(session, PoolRow)],
        estimate_note=note,
        next_url=next_url,
    )


@router.get("/teams", response_class=HTMLResponse)
def teams(request: Request, session: SessionDep, now: NowDep, viewer: ViewerDep) -> HTMLResponse:
    data = views.teams_view(session, now, viewer.may_see, metrics_loop(request).window)
    return render(
        request,
        "teams.html",
        title="Teams",
        active="/ui/teams",
        teams=data,
        window_s=views.DAY_S,
    )


@router.get("/nodes", response_class=HTMLResponse)
def nodes(request: Request, session: SessionDep, viewer: ViewerDep) -> HTMLResponse:
    return render(
        request,
        "nodes.html",
        title="Nodes",
        active="/ui/nodes",
        nodes=views.nodes_view(session, viewer.may_see),
    )


@router.get("/pools", response_class=HTMLResponse)
def pools(request: Request, session: SessionDep, viewer: ViewerDep) -> HTMLResponse:
    pool_rows = catalog.list_named(session, PoolRow)
    data = [{**catalog.pool_dict(r), "usage": pool_usage(session, r, viewer.may_see)}
            for r in pool_rows]
    leases = [
        {**jsonable_encoder(lease_out(lease)), "visible": viewer.may_see(team)}
        for lease, team in session.execute(
            select(LeaseRow, JobRow.team)
            .join(JobRow, JobRow.id == LeaseRow.job_id)
            .where(LeaseRow.state == "active")
            .order_by(LeaseRow.id)
        )
    ]
    return render(
        request,
        "pools.html",
        title="Pools & leases",
        active="/ui/pools",
        pools=data,
        leases=leases,
    )


@router.get("/fairness", response_class=HTMLResponse)
def fairness(
    request: Request,
    session: SessionDep,
    now: NowDep,
    viewer: ViewerDep,
    window_s: Annotated[float, Query(gt=0, le=366 * 86400)] = DEFAULT_WINDOW_S,
) -> HTMLResponse:
    return render(
        request,
        "fairness.html",
        title="Fairness",
        active="/ui/fairness",
        report=live_fairness(session, now, window_s, metrics_loop(request).window,
                             team=viewer.team),
    )


@router.get("/history", response_class=HTMLResponse)
def history(
    request: Request,
    session: SessionDep,
    now: NowDep,
    viewer: ViewerDep,
    window_s: Annotated[float, Query(ge=3600, le=7 * 86400)] = DEFAULT_WINDOW_S,
) -> HTMLResponse:
    """Queue depth, CU allocated per GPU type and each team's wait percentiles over the
    window, drawn by the vendored uPlot (app/reports/history.py reads only the jobs open
    now or ended in the window)."""
    data = series(spans(session, now, window_s), now.timestamp(), window_s)
    for key in ("wait_p50", "wait_p99"):  # a team sees its own waits only
        data[key] = {t: v for t, v in data[key].items() if viewer.may_see(t)}
    return render(
        request,
        "history.html",
        title="History",
        active="/ui/history",
        refresh_s=60,
        window_s=window_s,
        data=data,
    )


@router.get("/jobs", response_class=HTMLResponse)
def jobs(
    request: Request,
    session: SessionDep,
    now: NowDep,
    viewer: ViewerDep,
    team: str | None = None,
    pool: str | None = None,
    status: str | None = None,
    priority: str | None = None,
    cursor: str | None = None,
) -> HTMLResponse:
    filters = {
        "team": viewer.team or team or None,
        "pool": pool or None,
        "status": status or None,
        "priority": priority or None,
    }
    try:
        rows, next_cursor = job_store.list_jobs(
            session, limit=100, cursor=cursor or None, **filters
        )
    except GpuqError as e:
        return _error(request, "Jobs", e)
    items = []
    refs = JobRefs(session, viewer.team, [r.reason for r in rows])
    for r in rows:
        j = jsonable_encoder(job_out(r, now))
        j["reason"] = refs.text(j["reason"])
        where = sorted({f"{a['gpu_type'] or 'cpu'}@{a['node']}" for a in j["allocations"]})
        items.append({**j, "where": ", ".join(where)})
    query = {k: v for k, v in filters.items() if v}
    next_url = f"/ui/jobs?{urlencode({**query, 'cursor': next_cursor})}" if next_cursor else None
    team_names = [r.name for r in catalog.list_named(session, TeamRow) if viewer.may_see(r.name)]
    return render(
        request,
        "jobs.html",
        title="Jobs",
        active="/ui/jobs",
        items=items,
        filters=filters,
        teams=team_names,
        pools=[r.name for r in catalog.list_named(session, PoolRow)],
        statuses=STATUSES,
        priorities=[r.name for r in catalog.list_named(session, PriorityClassRow)],
        next_url=next_url,
    )


def _job_page(
    request: Request,
    session,
    now,
    viewer: Viewer,
    job_id: str,
    message: str | None = None,
    estimator: StartEstimator | None = None,
) -> HTMLResponse:
    try:
        row = job_store.get_job(session, job_id, team=viewer.team)
    except GpuqError as e:
        return _error(request, f"Job {job_id}", e)
    lease = job_store.active_lease(session, row)
    released = job_store.released_placements(session, row)
    out = job_out(row, now, lease, released)
    if row.status == "pending" and estimator is not None:
        out.estimated_start = estimator.starts(now)(out.id, row.reason_start_at, row.queued_at)
    history = job_store.job_events(session, row)
    refs = JobRefs(session, viewer.team, [out.reason, *(ev.reason for ev in history)])
    out.reason = refs.text(out.reason)
    body = jsonable_encoder(out)
    events = [{**jsonable_encoder(event_out(ev)), "reason": refs.text(ev.reason)}
              for ev in history]
    can_cancel = viewer.may_cancel(row.team) and row.status in CANCELLABLE
    return render(
        request,
        "job.html",
        title=f"Job {body['id']} · {body['name']}",
        active="/ui/jobs",
        job=body,
        events=events,
        can_cancel=can_cancel,
        message=message,
        refresh_s=None if can_cancel else 10,
    )


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job(
    request: Request,
    job_id: str,
    session: SessionDep,
    now: NowDep,
    viewer: ViewerDep,
    estimator: EstimatorDep,
    cancelled: int = 0,
) -> HTMLResponse:
    return _job_page(
        request, session, now, viewer, job_id, "cancel requested" if cancelled else None,
        estimator,
    )


@router.post("/jobs/{job_id}/cancel", response_model=None)
def cancel(
    request: Request,
    job_id: str,
    session: SessionDep,
    now: NowDep,
    viewer: ViewerDep,
    form: FormDep,
) -> Response:
    """Cancel through the API's own route function (same rules, same events)."""
    if viewer.principal is None:
        return _error(request, "Cancel", Unauthorized("log in with a token to cancel jobs"))
    if not viewer.check_csrf(form.get("csrf")):
        stale = Forbidden("the form is stale or came from another site; reload the page", "csrf")
        return _error(request, "Cancel", stale)
    try:
        api_cancel_job(job_id, session, viewer.principal, now)
    except GpuqError as e:
        return _error(request, f"Cancel job {job_id}", e)
    return RedirectResponse(f"/ui/jobs/{job_id}?cancelled=1", status_code=303)


@router.get("/tuning", response_class=HTMLResponse)
def tuning(request: Request, session: SessionDep, viewer: ViewerDep) -> HTMLResponse:
    state = {**load_state(session), "weights": current_weights(session)}
    history = list(reversed(load_history(session)))[:200]
    return render(
        request,
        "tuning.html",
        title="Weight tuner",
        active="/ui/tuning",
        state=state,
        history=history,
    )
