"""FastAPI dependencies as ``Annotated`` aliases (full-stack-template style).

Everything comes from ``request.app.state`` (set by :func:`app.main.create_app`),
never from module globals, so tests can build several apps side by side.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Annotated, Any

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from app.api.oidc import OidcVerifier, Unauthorized, looks_like_jwt
from app.domain.errors import Forbidden
from app.domain.pod_policy import InstallPolicy
from app.domain.principal import Principal
from app.settings import Settings
from app.store.audit import WriteBy

__all__ = ["Principal", "Unauthorized"]


def get_session(request: Request) -> Iterator[Session]:
    with request.app.state.session_factory() as session:
        yield session


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_now(request: Request) -> datetime:
    clock: Callable[[], datetime] = request.app.state.clock
    return clock()


def get_install_policy(request: Request) -> InstallPolicy:
    """The install's part of every team's Pod policy (``GPUQ_K8S_*``, read once per app)."""
    return request.app.state.install_policy


SessionDep = Annotated[Session, Depends(get_session)]
InstallDep = Annotated[InstallPolicy, Depends(get_install_policy)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
NowDep = Annotated[datetime, Depends(get_now)]


# The OpenAPI "bearer" scheme: every route that depends on it shows a lock in
# /docs (Authorize) and generated clients send the token. auto_error=False so a
# missing header is our 401 with a ``detail`` naming the header.
bearer = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="An API token (`gpuqt_...`, `gpuqa_...`) or, when OIDC is set up, "
    "a JWT of the identity provider.",
)


def get_principal(
    request: Request,
    session: SessionDep,
    now: NowDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)] = None,
) -> Principal:
    """Who calls (see :func:`resolve_principal`)."""
    return resolve_principal(request.app.state, session, bearer_token(credentials), now)


def bearer_token(credentials: HTTPAuthorizationCredentials | None) -> str | None:
    return credentials.credentials.strip() if credentials is not None else None


def resolve_principal(
    state: Any, session: Session, token: str | None, now: datetime, *, metrics: bool = False
) -> Principal:
    """Who sends ``token``: an API token (cached per process, a revocation seen at once
    by every replica: app/store/tokens.py) or an OIDC JWT (app/api/oidc.py). The one
    lookup every route uses (the submit routes call it inside their one worker-thread
    hop; others through :data:`PrincipalDep`). 401 when unknown, revoked or expired.

    A ``metrics`` token is refused here (403) unless the caller is ``GET /metrics``
    (``metrics=True``): it reads every team's series and may do nothing else."""
    if not token:
        raise Unauthorized("missing 'Authorization: Bearer TOKEN' header", "Authorization")
    oidc: OidcVerifier | None = state.oidc
    if oidc is not None and looks_like_jwt(token):
        return only_metrics_reads(oidc.principal(token), metrics)
    principal = state.principals.resolve(session, token, now)
    # End the lookup's transaction: the pooled connection goes back to the pool
    # while this request waits for a worker thread to run its route. Held across
    # that wait, 100 concurrent clients deadlocked the pool.
    session.commit()
    if principal is None:
        raise Unauthorized("unknown, revoked or expired token", "Authorization")
    return only_metrics_reads(principal, metrics)


def only_metrics_reads(principal: Principal, metrics: bool) -> Principal:
    if principal.metrics_only and not metrics:
        raise Forbidden("a token of scope metrics may only read GET /metrics", "Authorization")
    return principal


PrincipalDep = Annotated[Principal, Depends(get_principal)]
def bearer_required(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)] = None,
) -> HTTPAuthorizationCredentials:
    """The bearer credentials, or 401 at once: a dependency runs before the body is
    validated, so a request without a token gets 401, not a 422 about its body."""
    if credentials is None or not credentials.credentials.strip():
        raise Unauthorized("missing 'Authorization: Bearer TOKEN' header", "Authorization")
    return credentials


# the bearer credentials alone (routes that resolve the principal in a worker thread)
BearerDep = Annotated[HTTPAuthorizationCredentials, Depends(bearer_required)]


def require_admin(principal: PrincipalDep) -> Principal:
    if not principal.is_admin:
        raise Forbidden("this needs the admin token", "Authorization")
    return principal


AdminDep = Annotated[Principal, Depends(require_admin)]


def admin_write(principal: AdminDep, now: NowDep) -> WriteBy:
    """An admin write: who and when, for the audit trail (``GET /v1/audit``)."""
    return WriteBy(principal.name, now)


AdminWriteDep = Annotated[WriteBy, Depends(admin_write)]
