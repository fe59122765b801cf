"""The FastAPI application: ``create_app(settings)`` factory plus lifespan.

Without ``services`` the lifespan opens them (database, config, cluster,
loops) and closes them on shutdown; tests pass ready-made services.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from fastapi import Depends, FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import IntegrityError

from app.api.busy import ConcurrencyLimit
from app.api.db_errors import install_db_error_handlers
from app.api.estimates import estimator_for
from app.api.input_hints import hint
from app.api.oidc import OidcVerifier
from app.api.openapi import AllowMethods, install_truthful_openapi
from app.api.query_params import refuse_unknown_query
from app.api.routes import (
    audit,
    gpu_types,
    health,
    jobs,
    leases,
    metrics,
    nodes,
    pools,
    priority_classes,
    queue,
    reports,
    teams,
    tokens,
    tuning,
)
from app.api.routes.metrics import metrics_loop_of
from app.api.submit_rate import SubmitRate
from app.cluster.k8s_settings import KubeSettings
from app.dispatch.dispatcher import Dispatcher
from app.dispatch.metrics_loop import MetricsLoop
from app.domain.errors import GpuqError, TooManyRequests
from app.metrics import GpuqMetrics
from app.runtime import Services, open_services
from app.settings import Settings, get_settings
from app.store.catalog_cache import CatalogView, cached_catalog
from app.store.deadline import request_budget
from app.store.tokens import PrincipalCache
from app.ui import routes as ui_routes

ROUTERS = [
    health.router,
    gpu_types.router,
    nodes.router,
    pools.router,
    teams.router,
    priority_classes.router,
    jobs.router,
    queue.router,
    leases.router,
    tokens.router,
    tokens.me_router,
    audit.router,
    # observability: reports, tuner, Prometheus, dashboard
    reports.router,
    tuning.router,
    metrics.router,
]


def install_services(app: FastAPI, services: Services) -> None:
    app.state.services = services
    app.state.settings = services.settings
    app.state.engine = services.engine
    app.state.session_factory = services.session_factory
    app.state.clock = services.clock
    app.state.admin_token = services.admin_token
    services.seed_admin_token()
    app.state.cluster = services.cluster
    app.state.metrics = services.metrics
    # a queued Kubernetes workload shows the API's estimated start (gpuq.io/estimated-start)
    estimator = estimator_for(app)
    for loop in services.loops:
        if isinstance(loop, Dispatcher) and loop.front_door is not None:
            loop.front_door.start_of = lambda job_id, at: estimator.starts(services.clock())(
                job_id, at)


def _cached_catalog(request: Request) -> CatalogView | None:
    engine = getattr(request.app.state, "engine", None)
    return cached_catalog(engine) if engine is not None else None


def validation_detail(errors: list[dict], catalog: CatalogView | None = None) -> str:
    """'resources.gpus: Input should be greater than or equal to 0' from pydantic errors;
    misspelt fields and invalid names get the fix (:mod:`app.api.input_hints`)."""
    parts = []
    for err in errors[:3]:
        loc = [str(x) for x in err.get("loc", ())]
        if loc and loc[0] in ("body", "query", "path", "header"):
            loc = loc[1:]  # the detail starts with the field's name
        field = ".".join(loc) or "body"
        msg = hint(err, catalog) or str(err.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{field}: {msg}")
    return "; ".join(parts)


class RefuseNul:
    """A NUL character in the path or query is refused with a 422: PostgreSQL
    cannot store or compare text holding one (it used to surface as a 500)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            raw = scope.get("query_string") or b""
            if "\x00" in scope.get("path", "") or b"\x00" in raw or b"%00" in raw.lower():
                where = "path" if "\x00" in scope.get("path", "") else "query"
                payload = json.dumps(
                    {"detail": f"{where}: NUL characters are not allowed"}
                ).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 422,
                        "headers": [(b"content-type", b"application/json")],
                    }
                )
                await send({"type": "http.response.body", "body": payload})
                return
        await self.app(scope, receive, send)


class RequestBudget:
    """Give each HTTP request ``GPUQ_REQUEST_TIMEOUT`` seconds of database time in
    all (app/store/deadline.py): its pool waits and statements are cut to what is
    left, and a request past it answers 503 with Retry-After. The clock is
    ``app.state.monotonic`` (tests move it)."""

    def __init__(self, app, seconds: float) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or self.seconds <= 0:
            await self.app(scope, receive, send)
            return
        clock = getattr(scope["app"].state, "monotonic", time.monotonic)
        with request_budget(self.seconds, clock):
            await self.app(scope, receive, send)


class BodySizeLimit:
    """Refuse request bodies over ``max_bytes`` with a 413 (before any parsing)."""

    def __init__(self, app, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(send)
            return
        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            body.extend(message.get("body", b""))
            more = message.get("more_body", False)
            if len(body) > self.max_bytes:
                await self._too_large(send)
                return
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, send) -> None:
        payload = json.dumps(
            {"detail": f"body: larger than the limit of {self.max_bytes} bytes"}
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": payload})


def start_metrics_refresh(app: FastAPI, every_s: float) -> MetricsLoop | None:
    """Run this process's metrics pass every ``every_s`` seconds in a thread of its own,
    so a Prometheus scrape renders the last pass instead of waiting for one (a pass
    reads what changed: tens of ms, about 2 % of a core at 2.5 s). Every API process
    runs one: each serves its own ``/metrics``. A failing pass is logged and retried;
    the scrape route answers 503 once the last good pass is too old."""
    if every_s <= 0:
        return None
    loop = metrics_loop_of(app.state)
    loop.interval = every_s
    loop.start_in_thread()
    return loop


def create_app(settings: Settings | None = None, services: Services | None = None) -> FastAPI:
    settings = settings or (services.settings if services else get_settings())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # the worker threads of the synchronous routes (a setting, not anyio's 40)
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.worker_threads
        if services is not None:
            yield
            return
        svc = open_services(settings, with_loops=settings.run_loops)
        install_services(app, svc)
        svc.start_loops()
        refresher = start_metrics_refresh(app, settings.metrics_refresh_s)
        try:
            yield
        finally:
            if refresher is not None:
                refresher.stop_and_wait(5.0)
            svc.close()

    app = FastAPI(
        title="gpuq",
        version="0.1.0",
        description="A fair batch queue for Kubernetes clusters that mix GPU models.",
        lifespan=lifespan,
        docs_url=None,  # /docs and /redoc come from app.ui.docs, with assets shipped in
        redoc_url=None,  # the package instead of a CDN (GPU clusters are often off-line)
    )
    app.state.settings = settings
    app.state.metrics = GpuqMetrics()
    app.state.install_policy = KubeSettings().install_policy()
    app.state.principals = PrincipalCache()
    app.state.submit_rate = SubmitRate(settings.team_submit_rate, settings.team_submit_burst)
    app.state.oidc = OidcVerifier.from_settings(settings)
    if services is not None:
        install_services(app, services)

    @app.exception_handler(GpuqError)
    async def _gpuq_error(request: Request, exc: GpuqError) -> JSONResponse:
        headers = ({"Retry-After": str(exc.retry_after_s)}
                   if isinstance(exc, TooManyRequests) else None)
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code,
                            headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        return JSONResponse(
            {
                "detail": validation_detail(errors, _cached_catalog(request)),
                "errors": jsonable_encoder(
                    [{k: e[k] for k in ("loc", "msg", "type") if k in e} for e in errors]
                ),
            },
            status_code=422,
        )

    install_db_error_handlers(app)

    @app.exception_handler(IntegrityError)
    async def _integrity(request: Request, exc: IntegrityError) -> JSONResponse:
        return JSONResponse(
            {"detail": "conflicts with existing data (a name or key is already used)"},
            status_code=409,
        )

    for router in ROUTERS:
        # Prometheus' scrape may carry its own parameters (a scrape config's params), and
        # a probe is answered whatever its URL holds (openapi.PROBES)
        deps = ([] if router in (metrics.router, health.router)
                else [Depends(refuse_unknown_query)])
        app.include_router(router, dependencies=deps)
    install_truthful_openapi(app)
    app.add_middleware(RequestBudget, seconds=settings.request_timeout_s)
    # outside the budget: a request's database time starts once it has a slot
    app.add_middleware(ConcurrencyLimit, limit=settings.max_concurrent_requests,
                       wait_s=settings.busy_wait_s)
    app.add_middleware(AllowMethods, router_app=app)
    ui_routes.install(app)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(RefuseNul)
    return app
