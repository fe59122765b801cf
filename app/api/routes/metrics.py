"""``GET /metrics``: Prometheus exposition, behind a bearer token like every route.

Who sees what: the admin token and a ``metrics`` token (scope ``metrics``, for
Prometheus: ``gpuq tokens create metrics``; it can do nothing else) read every
series; a team token reads the cluster-wide series (no ``team`` label) and its
own team's, never another team's (:meth:`app.metrics.GpuqMetrics.render`).
Without a valid token: 401.

While the database is unavailable a scrape fails (503 with Retry-After, as
every route does): the gauges could only repeat what was true before the
outage, and a failed scrape is what Prometheus users alert on (``up == 0``).
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Request, Response, Security
from fastapi.security import HTTPAuthorizationCredentials
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from app.api.deps import NowDep, SessionDep, bearer, bearer_token, resolve_principal
from app.dispatch.metrics_loop import MetricsLoop
from app.metrics import CONTENT_TYPE
from app.store.deadline import RequestTimedOut

# the database is down, busy or too slow: the scrape fails (app/api/db_errors.py: 503)
DATABASE_TROUBLE = (OperationalError, InterfaceError, PoolTimeout, RequestTimedOut)

router = APIRouter(tags=["metrics"])
log = logging.getLogger("gpuq.metrics")


def metrics_loop(request: Request) -> MetricsLoop:
    """The app's :class:`~app.dispatch.metrics_loop.MetricsLoop`, created on first use."""
    return metrics_loop_of(request.app.state)


def metrics_loop_of(state: Any) -> MetricsLoop:
    """The metrics loop kept in an app's ``state`` (created on first use)."""
    loop = getattr(state, "metrics_loop", None)
    if loop is None:
        loop = state.metrics_loop = MetricsLoop(
            state.session_factory,
            state.metrics,
            clock=state.clock,
            prometheus_url=state.settings.prometheus_url,
            alerts_every_s=getattr(state, "metrics_alerts_every_s", 60.0),
        )
    return loop


@router.get("/metrics", include_in_schema=False)
def metrics(
    request: Request,
    session: SessionDep,
    now: NowDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)] = None,
) -> Response:
    # first who asks (401 without a valid token; the lookup reads the database, so
    # during an outage this is already the 503)
    principal = resolve_principal(
        request.app.state, session, bearer_token(credentials), now, metrics=True
    )
    try:
        # scrapes closer than this reuse the last pass (tests set 0 to always refresh);
        # the app's background refresh (GPUQ_METRICS_REFRESH_S) keeps one fresher than
        # that, so a scrape only renders; once passes fail (the database is down) the
        # last good one ages past this and the scrape computes, fails and answers 503
        metrics_loop(request).refresh(getattr(request.app.state, "metrics_max_age_s", 5.0))
    except DATABASE_TROUBLE:
        raise
    except Exception:  # serve what we have (and count the failure) rather than a 500
        log.exception("metrics refresh failed")
    team = None if principal.sees_every_team else principal.team
    return Response(request.app.state.metrics.render(team), media_type=CONTENT_TYPE)
