"""Who is looking at the dashboard, and what of it they may see.

The dashboard takes the same tokens as the API: an ``Authorization: Bearer``
header, or the token typed into ``/ui/login``, kept in an HttpOnly,
SameSite=Strict cookie scoped to ``/ui``. The token is resolved by the API's
own :func:`app.api.deps.get_principal`, so revocation and expiry act on the
dashboard exactly as on the API. Without a token the dashboard redirects to
the login form, unless the operator set ``GPUQ_UI_PUBLIC=true``: then an
anonymous visitor gets a read-only view (no cancel button).

A team token sees its own team's jobs only: other teams' jobs are counted
(queue positions stay global) but their names, ids and events are not shown.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import parse_qs, quote

from fastapi import Depends, Request
from fastapi.responses import RedirectResponse

from app.api.deps import Principal, SessionDep, Unauthorized, get_now, resolve_principal

COOKIE = "gpuq_ui_token"


class LoginRequired(Exception):
    """Raised by :func:`get_viewer` when a page needs a token and none (valid) was given."""

    def __init__(self, next_path: str, error: str | None = None) -> None:
        super().__init__(error or "login required")
        self.next_path = next_path
        self.error = error


@dataclass(frozen=True)
class Viewer:
    """A dashboard visitor: a principal with its token, or the public read-only visitor."""

    principal: Principal | None
    token: str | None

    @property
    def team(self) -> str | None:
        """The team whose jobs alone are shown; None for the admin and the public view."""
        return self.principal.team if self.principal is not None else None

    @property
    def label(self) -> str:
        if self.principal is None:
            return "public read-only"
        return "admin" if self.principal.is_admin else f"team {self.principal.team}"

    def may_see(self, team: str) -> bool:
        return self.team is None or self.team == team

    def may_cancel(self, team: str) -> bool:
        return self.principal is not None and self.principal.may_act_for(team)

    @property
    def csrf(self) -> str:
        """A per-token form key: a cross-site form cannot know it, so it cannot cancel."""
        if self.token is None:
            return ""
        return hmac.new(b"gpuq-ui-csrf", self.token.encode(), hashlib.sha256).hexdigest()[:32]

    def check_csrf(self, value: str | None) -> bool:
        return bool(self.token) and hmac.compare_digest(self.csrf, value or "")


def principal_for(request: Request, session, token: str) -> Principal:
    """The API's own token resolution (raises its 401 error when unknown or revoked)."""
    return resolve_principal(request.app.state, session, token, get_now(request))


def get_viewer(request: Request, session: SessionDep) -> Viewer:
    header = request.headers.get("authorization") or ""
    token = header.split(" ", 1)[1].strip() if header.lower().startswith("bearer ") else None
    token = token or request.cookies.get(COOKIE)
    next_path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    if token:
        try:
            viewer = Viewer(principal_for(request, session, token), token)
        except Unauthorized as e:  # a revoked, expired or mistyped token
            raise LoginRequired(next_path, "that token is unknown, expired or revoked") from e
    elif request.app.state.settings.ui_public:
        viewer = Viewer(None, None)
    else:
        raise LoginRequired(next_path)
    request.state.viewer = viewer
    return viewer


ViewerDep = Annotated[Viewer, Depends(get_viewer)]


def safe_next(path: str | None) -> str:
    """Only dashboard paths: a login link must not redirect off-site."""
    if path and path.startswith("/ui") and not path.startswith("//"):
        return path
    return "/ui"


def login_redirect(request: Request, exc: LoginRequired) -> RedirectResponse:
    url = f"/ui/login?next={quote(safe_next(exc.next_path), safe='')}"
    if exc.error:
        url += "&error=1"
    response = RedirectResponse(url, status_code=303)
    if exc.error:
        response.delete_cookie(COOKIE, path="/ui")
    return response


async def form_fields(request: Request) -> dict[str, str]:
    """An urlencoded form body (no python-multipart needed: the dashboard's forms are tiny)."""
    body = (await request.body()).decode("utf-8", errors="replace")
    return {k: v[0] for k, v in parse_qs(body, keep_blank_values=True).items()}


FormDep = Annotated[dict[str, str], Depends(form_fields)]
