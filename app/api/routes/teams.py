"""Teams, their quota, usage and API tokens (quota admin endpoints)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body
from pydantic import BaseModel, ConfigDict, Field

from app.api.deps import AdminDep, PrincipalDep, SessionDep
from app.api.schemas import TokenOut
from app.domain.config import TeamConfig
from app.domain.errors import InputError
from app.store import catalog
from app.store.orm import TeamRow
from app.store.tokens import create_team_token
from app.store.usage import team_usage

router = APIRouter(prefix="/v1/teams", tags=["teams"])


class QuotaIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    quota_units: float | None = Field(default=None, ge=0, le=10_000_000)
    quota_by_type: dict[str, float] = Field(default_factory=dict)


class TokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    description: str | None = Field(default=None, max_length=255)


@router.get("")
def list_teams(session: SessionDep, _: PrincipalDep) -> list[dict[str, Any]]:
    return [catalog.team_dict(r) for r in catalog.list_named(session, TeamRow)]


@router.post("", status_code=201)
def create_team(body: TeamConfig, session: SessionDep, _: AdminDep) -> dict[str, Any]:
    row = catalog.create_named(session, TeamRow, body)
    session.commit()
    return catalog.team_dict(row)


@router.get("/{name}")
def get_team(name: str, session: SessionDep, _: PrincipalDep) -> dict[str, Any]:
    return catalog.team_dict(catalog.get_named(session, TeamRow, name))


@router.patch("/{name}")
def patch_team(
    name: str, session: SessionDep, _: AdminDep, patch: dict[str, Any] = Body(...)
) -> dict[str, Any]:
    row = catalog.patch_named(session, catalog.get_named(session, TeamRow, name), patch)
    session.commit()
    return catalog.team_dict(row)


@router.delete("/{name}", status_code=204)
def delete_team(name: str, session: SessionDep, _: AdminDep) -> None:
    catalog.delete_named(session, catalog.get_named(session, TeamRow, name))
    session.commit()


@router.put("/{name}/quota")
def put_team_quota(name: str, body: QuotaIn, session: SessionDep, _: AdminDep) -> dict[str, Any]:
    for k, v in body.quota_by_type.items():
        if v < 0:
            raise InputError("must be >= 0", f"quota_by_type.{k}")
    row = catalog.patch_named(session, catalog.get_named(session, TeamRow, name), body.model_dump())
    session.commit()
    return catalog.team_dict(row)


@router.get("/{name}/usage")
def get_team_usage(name: str, session: SessionDep, principal: PrincipalDep) -> dict[str, Any]:
    principal.require_team(name)
    return team_usage(session, catalog.get_named(session, TeamRow, name))


@router.post("/{name}/tokens", status_code=201)
def create_token(
    name: str, session: SessionDep, _: AdminDep, body: TokenIn | None = None
) -> TokenOut:
    team = catalog.get_named(session, TeamRow, name)
    token = create_team_token(session, team.name, body.description if body else None)
    session.commit()
    return TokenOut(team=team.name, token=token, prefix=token[:12])
