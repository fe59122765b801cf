"""API tokens of every scope: create, list, revoke, rotate; and ``whoami``.

Only the admin manages tokens. Revoking or rotating acts at once on every
API replica (app/store/tokens.py: the principal cache is keyed on
``catalog_revision``, which every token write bumps).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.api.deps import AdminDep, AdminWriteDep, NowDep, PrincipalDep, SessionDep
from app.api.paging import NEXT_HEADERS, link_next_page
from app.api.schemas import CursorQuery, NameQuery, TokenInfo, TokenOut
from app.domain.errors import InputError, unknown
from app.domain.principal import parse_scope
from app.domain.spec import Text
from app.store.audit import WriteBy
from app.store.catalog_cache import current_catalog, refuse_unknown_filters
from app.store.jobs import decode_cursor, encode_cursor
from app.store.orm import ApiTokenRow, TeamRow
from app.store.tokens import (
    check_expiry,
    create_token,
    get_token,
    list_tokens,
    revoke_token,
    rotate_token,
    token_dict,
)

TokenIdPath = Annotated[int, Path(ge=1, le=2**63 - 1, description="the token's id")]

router = APIRouter(prefix="/v1/tokens", tags=["tokens"])
me_router = APIRouter(prefix="/v1", tags=["tokens"])

TOKEN_NAME = r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,62}$"


class Expiry(BaseModel):
    """An optional expiry: an instant, or seconds from now."""

    model_config = ConfigDict(extra="forbid")
    expires_at: datetime | None = Field(
        default=None, description="when it stops working (in the future)"
    )
    expires_in_s: float | None = Field(
        default=None, gt=0, le=10 * 365 * 86400, strict=True, description="or: seconds from now"
    )

    @field_validator("expires_at", mode="before")
    @classmethod
    def _text_instant(cls, v: object) -> object:
        # an instant is an RFC 3339 string, as the document says (not a bare number)
        if v is not None and not isinstance(v, str | datetime):
            raise ValueError("must be a date-time string, e.g. 2027-01-31T00:00:00Z")
        return v

    @field_validator("expires_at", mode="after")
    @classmethod
    def _aware_instant(cls, v: datetime | None) -> datetime | None:
        # a naive instant used to fail comparing with the aware clock (500), and an
        # offset that pushed the instant past year 9999 was stored and broke every read
        if v is None:
            return v
        if v.tzinfo is None or v.utcoffset() is None:
            raise ValueError("needs a time zone, e.g. 2027-01-31T00:00:00Z")
        try:
            return v.astimezone(UTC)
        except OverflowError:
            raise ValueError("is too far in the future") from None

    @model_validator(mode="after")
    def _one_expiry(self) -> Expiry:
        if self.expires_at is not None and self.expires_in_s is not None:
            raise ValueError("give expires_at or expires_in_s, not both")
        return self

    def expiry(self, now: datetime) -> datetime | None:
        if self.expires_in_s is not None:
            return now + timedelta(seconds=self.expires_in_s)
        check_expiry(self.expires_at, now)
        return self.expires_at



class NewToken(Expiry):
    name: str | None = Field(
        default=None, pattern=TOKEN_NAME,
        description="who or what uses it (a person, a CI system); recorded as submitted_by",
    )
    description: Text | None = Field(default=None, max_length=255)


class TokenIn(NewToken):
    """A new team token (POST /v1/teams/{name}/tokens)."""

    read_only: bool = Field(default=False, strict=True, description="scope team:<name>:read")


class ScopedTokenIn(NewToken):
    """A token of any scope (POST /v1/tokens)."""

    scope: str = Field(
        description="admin, team:<name>, team:<name>:read or metrics (GET /metrics only, "
        "every team's series: for Prometheus)",
        pattern=r"^(admin|metrics|team:[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(:read)?)$",
    )


def issue_token(
    session: Session, by: WriteBy, scope: str, body: NewToken
) -> tuple[ApiTokenRow, str]:
    """Create a token and audit it (without its value)."""
    row, token = create_token(
        session,
        scope=scope,
        name=body.name,
        expires_at=body.expiry(by.at),
        created_by=by.actor,
        description=body.description,
    )
    by.record(session, "create", "token", str(row.id), None, token_dict(row))
    return row, token


def token_out(row: ApiTokenRow, token: str) -> TokenOut:
    info = token_dict(row)
    return TokenOut(team=row.team, token=token, prefix=row.prefix, id=row.id,
                    name=info["name"], scope=info["scope"], expires_at=row.expires_at)


@router.post("", status_code=201)
def create_any_token(body: ScopedTokenIn, session: SessionDep, by: AdminWriteDep) -> TokenOut:
    """A token of any scope, an admin one included (a second admin, a CI system). A
    scope naming a team that does not exist is a 422 at ``scope`` with the teams there
    are (the body's reference, as a team's ``pool``; was an undocumented 404)."""
    team, _read = parse_scope(body.scope)
    if team is not None and session.get(TeamRow, team) is None:
        names = session.scalars(select(TeamRow.name)).all()
        raise InputError(unknown("team", team, names), "scope")
    row, token = issue_token(session, by, body.scope, body)
    session.commit()
    return token_out(row, token)


MAX_LIMIT = 500


@router.get("", responses={200: {"headers": NEXT_HEADERS}})
def list_all_tokens(
    request: Request,
    response: Response,
    session: SessionDep,
    _: AdminDep,
    now: NowDep,
    team: NameQuery = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="tokens per page")] = MAX_LIMIT,
    cursor: CursorQuery = None,
) -> list[TokenInfo]:
    """Every token (never its value), oldest first, a page at a time. Revoked, rotated
    and expired tokens stay as history, so an answer is at most ``limit`` tokens (before:
    every token ever made); the body stays a list and the next page's cursor comes in the
    ``X-Next-Cursor`` and ``Link`` headers, as GET /v1/queue's. A ``team`` that does not
    exist is a 422 with the valid names, as GET /v1/jobs answers."""
    refuse_unknown_filters(current_catalog(session), team=team)
    rows = list_tokens(session, team, after=decode_cursor(cursor) if cursor else None,
                       limit=limit + 1)
    if len(rows) > limit:
        rows = rows[:limit]
        link_next_page(request, response, encode_cursor(rows[-1].id))
    return [TokenInfo(**token_dict(r, now)) for r in rows]


@router.post("/{token_id}/revoke")
def revoke(token_id: TokenIdPath, session: SessionDep, by: AdminWriteDep) -> TokenInfo:
    """From now on the token gets 401, on every replica. The last admin token
    cannot be revoked (rotate it)."""
    row = get_token(session, token_id, for_update=True)
    old = token_dict(row, by.at)
    revoke_token(session, row, by.at)
    new = token_dict(row, by.at)
    by.record(session, "revoke", "token", str(row.id), old, new)
    session.commit()
    return TokenInfo(**new)


@router.post("/{token_id}/rotate", status_code=201)
def rotate(
    token_id: TokenIdPath, session: SessionDep, by: AdminWriteDep, body: Expiry | None = None
) -> TokenOut:
    """Revoke the token and issue its successor (same name and scope) at once:
    how the admin token changes without a restart."""
    row = get_token(session, token_id, for_update=True)
    old = token_dict(row, by.at)
    new_row, token = rotate_token(
        session, row, by.at, expires_at=(body or Expiry()).expiry(by.at), created_by=by.actor
    )
    by.record(session, "rotate", "token", str(row.id), old, token_dict(new_row, by.at))
    session.commit()
    return token_out(new_row, token)


@me_router.get("/whoami")
def whoami(principal: PrincipalDep) -> dict[str, Any]:
    """The caller as gpuq sees it: name (what ``submitted_by`` records) and scope."""
    return {"name": principal.name, "scope": principal.scope, "team": principal.team,
            "read_only": principal.read_only}
