"""``GET /metrics``: Prometheus exposition (open without a token)."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request, Response

from app.dispatch.metrics import MetricsLoop
from app.metrics import CONTENT_TYPE

router = APIRouter(tags=["metrics"])
log = logging.getLogger("gpuq.metrics")


def metrics_loop(request: Request):
    """The app's :class:`~app.dispatch.metrics.MetricsLoop`, created on first use."""

    state = request.app.state
    loop = getattr(state, "metrics_loop", None)
    if loop is None:
        loop = state.metrics_loop = MetricsLoop(
            state.session_factory,
            state.metrics,
            clock=state.clock,
            prometheus_url=state.settings.prometheus_url,
        )
    return loop


@router.get("/metrics", include_in_schema=False)
def metrics(request: Request) -> Response:
    try:
        # scrapes closer than this reuse the last pass (tests set 0 to always refresh)
        metrics_loop(request).refresh(getattr(request.app.state, "metrics_max_age_s", 5.0))
    except Exception:  # serve what we have (and count the failure) rather than a 500
        log.exception("metrics refresh failed")
    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE)
