"""FastAPI dependencies as ``Annotated`` aliases (full-stack-template style).

Everything comes from ``request.app.state`` (set by :func:`app.main.create_app`),
never from module globals, so tests can build several apps side by side.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from fastapi import Depends, Header, Request
from sqlalchemy.orm import Session

from app.domain.errors import Forbidden, GpuqError
from app.settings import Settings
from app.store.tokens import same_token, team_for_token


class Unauthorized(GpuqError):
    status_code = 401


def get_session(request: Request) -> Iterator[Session]:
    with request.app.state.session_factory() as session:
        yield session


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_now(request: Request) -> datetime:
    clock: Callable[[], datetime] = request.app.state.clock
    return clock()


SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
NowDep = Annotated[datetime, Depends(get_now)]


@dataclass(frozen=True)
class Principal:
    """Who calls: the admin (``team is None``) or one team's token."""

    team: str | None

    @property
    def is_admin(self) -> bool:
        return self.team is None

    def may_act_for(self, team: str) -> bool:
        return self.is_admin or self.team == team

    def require_team(self, team: str, field: str = "team") -> None:
        if not self.may_act_for(team):
            raise Forbidden(f"a token of team {self.team} may not act for team {team!r}", field)


def get_principal(
    request: Request,
    session: SessionDep,
    authorization: Annotated[str | None, Header()] = None,
) -> Principal:
    return resolve_principal(request.app.state, session, authorization)


def resolve_principal(state: Any, session: Session, authorization: str | None) -> Principal:
    """Who sends ``authorization``: the one lookup every route uses (the submit route
    calls it inside its one worker-thread hop; others through :data:`PrincipalDep`)."""
    if not authorization or not authorization.lower().startswith("bearer "):
        raise Unauthorized("missing 'Authorization: Bearer TOKEN' header", "Authorization")
    token = authorization.split(" ", 1)[1].strip()
    admin = state.admin_token
    if admin and same_token(token, admin):
        return Principal(team=None)
    team = team_for_token(session, token)
    if team is None:
        raise Unauthorized("unknown or revoked token", "Authorization")
    return Principal(team=team)


PrincipalDep = Annotated[Principal, Depends(get_principal)]


def require_admin(principal: PrincipalDep) -> Principal:
    if not principal.is_admin:
        raise Forbidden("this needs the admin token", "Authorization")
    return principal


AdminDep = Annotated[Principal, Depends(require_admin)]
