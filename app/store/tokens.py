"""API tokens: random, shown once, stored as SHA-256; named, scoped, expiring.

A token has 32 random bytes, so a fast hash is enough (no password
stretching needed) and a lookup is one indexed query. The admin tokens live
in the same table (scope ``admin``): ``GPUQ_ADMIN_TOKEN`` (or the generated
one) only seeds the first, so the admin token rotates without a restart.

Principal resolution is cached per process (:class:`PrincipalCache`), keyed
on ``catalog_revision``: every write to ``api_tokens`` bumps it (statement
trigger, migration 0006) in the writer's transaction, so one tiny read per
request tells every API replica at once that a token was revoked or rotated.
Expiry is checked against the request's clock on every hit.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from app.domain.errors import Conflict, InputError, NotFound
from app.domain.principal import (
    ADMIN_SCOPE,
    METRICS_SCOPE,
    Principal,
    parse_scope,
    team_scope,
)
from app.store.orm import ApiTokenRow, CatalogRevisionRow, TeamRow

TEAM_PREFIX = "gpuqt_"
ADMIN_PREFIX = "gpuqa_"
METRICS_PREFIX = "gpuqm_"
#: lock key serialising the first admin token's seeding across processes
_SEED_LOCK = 0x67707571_00000001


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token(prefix: str = TEAM_PREFIX) -> str:
    return prefix + secrets.token_urlsafe(32)


def row_scope(row: ApiTokenRow) -> str:
    """Rows written before migration 0006 have no scope: they act for their team."""
    return row.scope or team_scope(row.team or "")


def row_name(row: ApiTokenRow) -> str:
    return row.name or row.prefix


def create_token(
    session: Session,
    *,
    scope: str,
    name: str | None = None,
    expires_at: datetime | None = None,
    created_by: str | None = None,
    description: str | None = None,
    token: str | None = None,
) -> tuple[ApiTokenRow, str]:
    """Add a token and return (row, clear token): the only time it is seen."""
    team, _read = parse_scope(scope)
    if team is not None and session.get(TeamRow, team) is None:
        raise NotFound(f"team {team!r} not found")
    prefix = (TEAM_PREFIX if team is not None
              else METRICS_PREFIX if scope == METRICS_SCOPE else ADMIN_PREFIX)
    token = token or new_token(prefix)
    row = ApiTokenRow(
        team=team,
        token_hash=hash_token(token),
        prefix=token[:12],
        description=description,
        name=name or token[:12],
        scope=scope,
        expires_at=expires_at,
        created_by=created_by,
    )
    session.add(row)
    session.flush()
    return row, token


def list_tokens(session: Session, team: str | None = None, *, after: int | None = None,
                limit: int | None = None) -> list[ApiTokenRow]:
    """Tokens by id, those after ``after``, at most ``limit`` (through the primary key:
    revoked and rotated tokens stay as history, so a page costs its size, not the
    history's)."""
    q = select(ApiTokenRow).order_by(ApiTokenRow.id)
    if team is not None:
        q = q.where(ApiTokenRow.team == team)
    if after is not None:
        q = q.where(ApiTokenRow.id > after)
    if limit is not None:
        q = q.limit(limit)
    return list(session.scalars(q))


def get_token(session: Session, token_id: int, *, for_update: bool = False) -> ApiTokenRow:
    q = select(ApiTokenRow).where(ApiTokenRow.id == token_id)
    row = session.scalar(q.with_for_update() if for_update else q)
    if row is None:
        raise NotFound(f"token {token_id} not found")
    return row


def revoke_token(session: Session, row: ApiTokenRow, now: datetime) -> None:
    if row.revoked_at is not None:
        raise Conflict(f"token {row.id} is already revoked", "id")
    if row_scope(row) == ADMIN_SCOPE and _active_admin_count(session, now) <= 1:
        raise Conflict("this is the last admin token: rotate it instead", "id")
    row.revoked_at = now
    session.flush()


def rotate_token(
    session: Session,
    row: ApiTokenRow,
    now: datetime,
    *,
    expires_at: datetime | None = None,
    created_by: str | None = None,
) -> tuple[ApiTokenRow, str]:
    """Revoke ``row`` and issue its successor (same name and scope) in one transaction."""
    if row.revoked_at is not None:
        raise Conflict(f"token {row.id} is revoked; create a new one", "id")
    expiry = expires_at if expires_at is not None else row.expires_at
    if row_scope(row) == ADMIN_SCOPE and expiry is not None and not _lasting_admin(
        session, now, but=row.id
    ):
        # rotating the last admin token with `expires_in_s: 2` once locked every
        # admin out for good; one admin token that does not expire must remain
        raise Conflict(
            "this is the last admin token that does not expire: its successor cannot expire "
            "either (rotate without an expiry, or create a second admin token first)",
            "expires_at",
        )
    row.revoked_at = now
    session.flush()
    return create_token(
        session,
        scope=row_scope(row),
        name=row.name,
        expires_at=expiry,
        created_by=created_by,
        description=row.description,
    )


def _active_admin_count(session: Session, now: datetime) -> int:
    return session.scalar(
        select(func.count())
        .select_from(ApiTokenRow)
        .where(
            ApiTokenRow.scope == ADMIN_SCOPE,
            ApiTokenRow.revoked_at.is_(None),
            (ApiTokenRow.expires_at.is_(None)) | (ApiTokenRow.expires_at > now),
        )
    ) or 0


def _lasting_admin(session: Session, now: datetime, *, but: int) -> bool:
    """Is there an active admin token without an expiry other than token ``but``?"""
    return bool(session.scalar(
        select(func.count())
        .select_from(ApiTokenRow)
        .where(
            ApiTokenRow.scope == ADMIN_SCOPE,
            ApiTokenRow.revoked_at.is_(None),
            ApiTokenRow.expires_at.is_(None),
            ApiTokenRow.id != but,
        )
    ))


def reset_admin(session: Session, now: datetime) -> tuple[ApiTokenRow, str]:
    """Break-glass (``gpuq tokens reset-admin``, run with database access): revoke every
    admin token and issue one new admin token without an expiry. For an install whose
    admins are locked out (lost or expired tokens); the caller commits and audits."""
    for row in session.scalars(
        select(ApiTokenRow).where(
            ApiTokenRow.scope == ADMIN_SCOPE, ApiTokenRow.revoked_at.is_(None)
        ).with_for_update()
    ):
        row.revoked_at = now
    session.flush()
    return create_token(session, scope=ADMIN_SCOPE, name="admin", created_by="reset-admin")


def seed_admin_token(session: Session, token: str, source: str) -> bool:
    """Store ``token`` as the first admin token unless one was ever stored (even
    if revoked since: a rotated admin token must not come back at the next start).
    True when it was stored. The caller commits."""
    session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _SEED_LOCK})
    ever = session.scalar(
        select(func.count()).select_from(ApiTokenRow).where(ApiTokenRow.scope == ADMIN_SCOPE)
    )
    if ever:
        return False
    create_token(session, scope=ADMIN_SCOPE, name="admin", created_by=source, token=token)
    return True


def token_dict(row: ApiTokenRow, now: datetime | None = None) -> dict:
    """What listing a token shows (never the hash)."""
    state = "active"
    if row.revoked_at is not None:
        state = "revoked"
    elif row.expires_at is not None and now is not None and row.expires_at <= now:
        state = "expired"
    return {
        "id": row.id,
        "name": row_name(row),
        "scope": row_scope(row),
        "team": row.team,
        "prefix": row.prefix,
        "description": row.description,
        "created_at": row.created_at,
        "created_by": row.created_by,
        "expires_at": row.expires_at,
        "revoked_at": row.revoked_at,
        "state": state,
    }


# -- principal resolution ------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    principal: Principal
    expires_at: datetime | None


class PrincipalCache:
    """token hash -> principal, valid while ``catalog_revision`` does not move.

    One process-wide instance per app; thread-safe. A request costs one
    primary-key read of ``catalog_revision`` on a hit (none for a submit: see
    :meth:`peek`), plus one indexed token read on a miss. Unknown tokens are
    never cached (no memory for whoever guesses), and the map is bounded.
    """

    MAX_ENTRIES = 10_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._revision: int | None = None
        self._entries: dict[str, _Entry] = {}

    def peek(self, token: str, now: datetime) -> tuple[Principal, int] | None:
        """The cached principal of ``token`` and the catalog revision it is valid at,
        without asking the database (None: not cached, or expired). Only for a caller
        whose one statement then checks that ``catalog_revision`` still has that number
        (the submit's INSERT does): a revoke moves the revision, so it still acts at once."""
        with self._lock:
            hit = self._entries.get(hash_token(token))
            rev = self._revision
        if hit is None or rev is None:
            return None
        if hit.expires_at is not None and hit.expires_at <= now:
            return None
        return hit.principal, rev

    def resolve(self, session: Session, token: str, now: datetime) -> Principal | None:
        rev = session.scalar(
            select(CatalogRevisionRow.revision).where(CatalogRevisionRow.id == 1)
        )
        h = hash_token(token)
        with self._lock:
            if rev is None or rev != self._revision:
                self._entries.clear()
                self._revision = rev
            hit = self._entries.get(h)
        if hit is None:
            row = session.scalar(
                select(ApiTokenRow).where(
                    ApiTokenRow.token_hash == h, ApiTokenRow.revoked_at.is_(None)
                )
            )
            if row is None:
                return None
            hit = _Entry(Principal.from_scope(row_scope(row), f"token:{row_name(row)}"),
                         row.expires_at)
            with self._lock:
                if self._revision == rev:
                    if len(self._entries) >= self.MAX_ENTRIES:
                        self._entries.clear()
                    self._entries[h] = hit
        if hit.expires_at is not None and hit.expires_at <= now:
            return None
        return hit.principal


# The longest a token may live when it expires at all (a later expiry is an input error,
# before anything is written: one stored in year 10000 once broke every read of it).
MAX_EXPIRY = timedelta(days=10 * 365)


def check_expiry(expires_at: datetime | None, now: datetime) -> None:
    if expires_at is None:
        return
    if expires_at.tzinfo is None:
        raise InputError("needs a time zone, e.g. 2027-01-31T00:00:00Z", "expires_at")
    if expires_at <= now:
        raise InputError("must be in the future", "expires_at")
    if expires_at > now + MAX_EXPIRY:
        raise InputError("must be at most 10 years from now", "expires_at")
