"""Liveness and readiness (open without a token)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

from app.store.migrate import SchemaNotCurrent, check_current

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
def readyz(request: Request) -> JSONResponse:
    engine = request.app.state.engine
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        check_current(engine)
    except SchemaNotCurrent as e:
        return JSONResponse({"status": "not ready", "detail": str(e)}, status_code=503)
    except Exception as e:  # the database is down: not ready, and say why
        return JSONResponse(
            {"status": "not ready", "detail": f"database: {type(e).__name__}"}, status_code=503
        )
    return JSONResponse({"status": "ready"})
