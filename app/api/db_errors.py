"""Database trouble as answers a client can act on: 503 + Retry-After, JSON.

A database that is down, a pool with no free connection within its timeout,
a statement cancelled by ``statement_timeout`` or a request past
``GPUQ_REQUEST_TIMEOUT`` (app/store/deadline.py) are not the client's fault
and not a bug: they get ``503 {"detail": ...}`` with ``Retry-After``, fast,
and the HTTP connection stays open for the retry (an unhandled error used to
answer a text/plain 500 and drop the keep-alive connection). Text PostgreSQL
refuses (a NUL character) is the client's input: 422.
"""

from __future__ import annotations

import logging

import psycopg
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from app.store.deadline import RequestTimedOut

log = logging.getLogger("gpuq.api")

DB_UNAVAILABLE = "database unavailable, retry"
DB_BUSY = "database busy, retry"
RETRY_AFTER_S = 2


def unavailable(detail: str = DB_UNAVAILABLE) -> JSONResponse:
    return JSONResponse(
        {"detail": detail}, status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)}
    )


def install_db_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(PoolTimeout)
    async def _pool_timeout(request: Request, exc: PoolTimeout) -> JSONResponse:
        log.warning("%s %s: no database connection free in time", request.method,
                    request.url.path)
        return unavailable(DB_BUSY)

    @app.exception_handler(RequestTimedOut)
    async def _request_timeout(request: Request, exc: RequestTimedOut) -> JSONResponse:
        log.warning("%s %s: %s", request.method, request.url.path, exc)
        return unavailable(DB_BUSY)

    @app.exception_handler(OperationalError)
    async def _operational(request: Request, exc: OperationalError) -> JSONResponse:
        if isinstance(exc.orig, psycopg.errors.QueryCanceled):
            log.warning("%s %s: statement timed out", request.method, request.url.path)
            return unavailable(DB_BUSY)
        log.warning("%s %s: database unavailable: %s", request.method, request.url.path,
                    str(exc.orig).splitlines()[0] if exc.orig else exc)
        return unavailable()

    @app.exception_handler(InterfaceError)
    async def _interface(request: Request, exc: InterfaceError) -> JSONResponse:
        log.warning("%s %s: database connection lost", request.method, request.url.path)
        return unavailable()

    @app.exception_handler(DataError)
    async def _data(request: Request, exc: DataError) -> JSONResponse:
        first = str(exc.orig).splitlines()[0] if exc.orig else "invalid value"
        return JSONResponse({"detail": f"invalid value: {first}"}, status_code=422)

    @app.exception_handler(DBAPIError)
    async def _dbapi(request: Request, exc: DBAPIError) -> JSONResponse:
        if exc.connection_invalidated:
            log.warning("%s %s: database connection lost", request.method, request.url.path)
            return unavailable()
        raise exc
