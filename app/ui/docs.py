"""``/docs`` (Swagger UI) and ``/redoc`` from assets shipped in the package.

FastAPI's defaults load Swagger UI and ReDoc from a CDN, so on a cluster
without internet (most GPU clusters) ``/docs`` is a blank page. The files are
vendored under ``app/ui/static/vendor`` (see its README and ``make
docs-assets``) and served by the dashboard's static mount; Swagger's online
validator badge and ReDoc's web fonts are turned off for the same reason.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse

VENDOR = "/ui/static/vendor"
OAUTH2_REDIRECT = "/docs/oauth2-redirect"

router = APIRouter(include_in_schema=False)


@router.get("/docs", response_class=HTMLResponse)
def swagger_ui(request: Request) -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url=request.app.openapi_url,
        title=f"{request.app.title} · API docs",
        swagger_js_url=f"{VENDOR}/swagger-ui/swagger-ui-bundle.js",
        swagger_css_url=f"{VENDOR}/swagger-ui/swagger-ui.css",
        swagger_favicon_url=f"{VENDOR}/swagger-ui/favicon-32x32.png",
        oauth2_redirect_url=OAUTH2_REDIRECT,
        swagger_ui_parameters={"validatorUrl": None, "persistAuthorization": True},
    )


@router.get(OAUTH2_REDIRECT, response_class=HTMLResponse)
def swagger_ui_redirect() -> HTMLResponse:
    return get_swagger_ui_oauth2_redirect_html()


@router.get("/redoc", response_class=HTMLResponse)
def redoc(request: Request) -> HTMLResponse:
    return get_redoc_html(
        openapi_url=request.app.openapi_url,
        title=f"{request.app.title} · API reference",
        redoc_js_url=f"{VENDOR}/redoc/redoc.standalone.js",
        redoc_favicon_url=f"{VENDOR}/swagger-ui/favicon-32x32.png",
        with_google_fonts=False,
    )
