"""Teams, their quota, usage and API tokens (quota admin endpoints)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Body
from pydantic import BaseModel, ConfigDict, Field

from app.api import examples
from app.api.deps import AdminDep, AdminWriteDep, NowDep, PrincipalDep, SessionDep
from app.api.routes.tokens import TokenIn, issue_token, token_out
from app.api.schemas import NamePath, TokenInfo, TokenOut, patch_model
from app.domain.config import TeamConfig
from app.domain.errors import NotFound
from app.domain.people import for_people
from app.domain.principal import team_scope
from app.store import catalog
from app.store.orm import TeamRow
from app.store.tokens import list_tokens, token_dict
from app.store.usage import team_usage

if TYPE_CHECKING:  # a class built at run time: to the checker, the BaseModel it is
    TeamPatch = BaseModel
else:
    TeamPatch = patch_model(TeamConfig)

router = APIRouter(prefix="/v1/teams", tags=["teams"])


class QuotaIn(BaseModel):
    """A team's quota. ``quota_units`` is required, so ``{}`` is a 422, never "unlimited"
    by accident; without ``quota_by_type`` the per-type caps stay as they are."""

    model_config = ConfigDict(extra="forbid", strict=True)
    quota_units: float | None = Field(
        ge=0,
        le=10_000_000,
        description="CU cap over all GPU types; an explicit null means unlimited",
    )
    quota_by_type: dict[str, Annotated[float, Field(ge=0)]] | None = Field(
        default=None,
        description="CU cap per GPU type ({} for none; a type not named is only capped by "
        "quota_units); absent or null: the team's per-type caps stay as they are",
    )


@router.get("")
def list_teams(session: SessionDep, principal: PrincipalDep) -> list[dict[str, Any]]:
    """Every team for the admin; a team token's own team only (another team's quota,
    namespaces and ServiceAccounts are not its business)."""
    if principal.team is not None:
        return [catalog.team_dict(catalog.get_named(session, TeamRow, principal.team))]
    return [catalog.team_dict(r) for r in catalog.list_named(session, TeamRow)]


@router.post("", status_code=201)
def create_team(
    body: Annotated[TeamConfig, Body(openapi_examples=examples.TEAM)],
    session: SessionDep,
    by: AdminWriteDep,
) -> dict[str, Any]:
    row = catalog.create_named(session, TeamRow, body, by)
    session.commit()
    return catalog.team_dict(row)


@router.get("/{name}")
def get_team(name: NamePath, session: SessionDep, principal: PrincipalDep) -> dict[str, Any]:
    """A team token reads its own team; any other name is a 404 that lists no team names
    (as another team's job is a 404 like a job that does not exist)."""
    if not principal.may_act_for(name):
        raise NotFound(f"team {name!r} not found")
    return catalog.team_dict(catalog.get_named(session, TeamRow, name))


@router.patch("/{name}")
def patch_team(
    name: NamePath, session: SessionDep, by: AdminWriteDep, patch: TeamPatch
) -> dict[str, Any]:
    row = catalog.get_named(session, TeamRow, name)
    row = catalog.patch_named(session, row, patch.model_dump(exclude_unset=True), by)
    session.commit()
    return catalog.team_dict(row)


@router.delete("/{name}", status_code=204)
def delete_team(name: NamePath, session: SessionDep, by: AdminWriteDep) -> None:
    catalog.delete_named(session, catalog.get_named(session, TeamRow, name), by)
    session.commit()


@router.put("/{name}/quota")
def put_team_quota(
    name: NamePath, body: QuotaIn, session: SessionDep, by: AdminWriteDep
) -> dict[str, Any]:
    """Set the team's quota (``quota_units`` required, ``null`` = unlimited; per-type caps
    replaced when ``quota_by_type`` is given, kept when it is absent or null)."""
    patch: dict[str, Any] = {"quota_units": body.quota_units}
    if body.quota_by_type is not None:
        patch["quota_by_type"] = body.quota_by_type
    row = catalog.patch_named(session, catalog.get_named(session, TeamRow, name), patch, by)
    session.commit()
    return catalog.team_dict(row)


@router.get("/{name}/usage")
def get_team_usage(
    name: NamePath, session: SessionDep, principal: PrincipalDep
) -> dict[str, Any]:
    principal.require_team(name)
    return for_people(team_usage(session, catalog.get_named(session, TeamRow, name)))


@router.post("/{name}/tokens", status_code=201)
def create_token(
    name: NamePath, session: SessionDep, by: AdminWriteDep, body: TokenIn | None = None
) -> TokenOut:
    """A token for the team (scope ``team:<name>``, or ``team:<name>:read`` with
    ``read_only``); the clear token is in this answer only."""
    team = catalog.get_named(session, TeamRow, name)
    body = body or TokenIn()
    row, token = issue_token(session, by, team_scope(team.name, body.read_only), body)
    session.commit()
    return token_out(row, token)


@router.get("/{name}/tokens")
def list_team_tokens(
    name: NamePath, session: SessionDep, _: AdminDep, now: NowDep
) -> list[TokenInfo]:
    """The team's tokens (never their value): name, scope, expiry, revoked or not."""
    team = catalog.get_named(session, TeamRow, name)
    return [TokenInfo(**token_dict(r, now)) for r in list_tokens(session, team.name)]
