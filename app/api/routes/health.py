"""Liveness and readiness (open without a token)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.store.migrate import schema_status

router = APIRouter(tags=["health"])


def _status(example: dict[str, str]) -> dict[str, Any]:
    """An OpenAPI response of string fields (``status`` always), with a real example
    (an empty schema rendered as ReDoc's placeholder ``{"property1": "string"}``)."""
    props = {k: {"type": "string"} for k in example}
    schema = {"type": "object", "properties": props, "required": ["status"]}
    return {"content": {"application/json": {"schema": schema, "example": example}}}


HEALTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "alive", **_status({"status": "ok"})},
    503: {"description": "stuck: restart it",
          **_status({"status": "unhealthy", "detail": "dispatcher pass stuck for 312 s"})},
}
READY_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "ready",
          **_status({"status": "ready", "schema": "0010 (head)"})},
    503: {"description": "not ready",
          **_status({"status": "not ready", "detail": "database: OperationalError"})},
}


@router.get("/healthz", response_model=None, responses=HEALTH_RESPONSES)
def healthz(request: Request) -> dict[str, str] | JSONResponse:
    """Liveness: a process whose dispatcher pass is stuck past GPUQ_PASS_DEADLINE, or
    whose Kubernetes watches stopped following the cluster, answers 503 with why, so
    the kubelet restarts it (no database read: a database outage is /readyz's)."""
    services = getattr(request.app.state, "services", None)
    problems = services.health() if services is not None else []
    if problems:
        return JSONResponse({"status": "unhealthy", "detail": "; ".join(problems)},
                            status_code=503)
    return {"status": "ok"}


@router.get("/readyz", responses=READY_RESPONSES)
def readyz(request: Request) -> JSONResponse:
    engine = request.app.state.engine
    try:
        schema = schema_status(engine)  # one connection: reachable, and which schema
    except Exception as e:  # the database is down: not ready, and say why
        return JSONResponse(
            {"status": "not ready", "detail": f"database: {type(e).__name__}"}, status_code=503
        )
    # ready on the code's schema or a newer compatible one, so pods of the previous
    # release stay in service while a new release rolls out (docs/upgrading.md)
    if not schema.ready:
        return JSONResponse({"status": "not ready", "detail": schema.detail}, status_code=503)
    return JSONResponse({"status": "ready", "schema": schema.detail})
