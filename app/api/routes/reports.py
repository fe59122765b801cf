"""Fairness and utilization reports (any valid token may read them; a team token's fairness
report covers its own team's jobs only)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from app.api.deps import NowDep, PrincipalDep, SessionDep
from app.api.routes.metrics import metrics_loop
from app.domain.people import for_people
from app.reports.live import DEFAULT_WINDOW_S, live_fairness, live_utilization

router = APIRouter(prefix="/v1/reports", tags=["reports"])


@router.get("/fairness")
def fairness(
    request: Request,
    session: SessionDep,
    principal: PrincipalDep,
    now: NowDep,
    window_s: Annotated[
        float,
        Query(gt=0, le=366 * 86400, description="seconds back from now (jobs pending count too)"),
    ] = DEFAULT_WINDOW_S,
) -> dict[str, Any]:
    """Wait P50/P99, P99/P50 and JCT P50 per team, pool, priority and GPU type; alerts.
    A team token's report covers its own team's jobs only."""
    return for_people(live_fairness(session, now, window_s, metrics_loop(request).window,
                                    team=principal.team))


@router.get("/utilization")
def utilization(
    request: Request, session: SessionDep, _: PrincipalDep, now: NowDep
) -> dict[str, Any]:
    """Per GPU type: capacity and allocated CU, ratio, free cards/slices, pending, idle, DCGM."""
    snap = metrics_loop(request).snapshot(now)
    return for_people(
        live_utilization(session, snap, request.app.state.settings.prometheus_url)
    )
