"""Team API tokens: random, shown once, stored as SHA-256.

A token has 32 random bytes, so a fast hash is enough (no password
stretching needed) and lookups stay one indexed query.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.store.orm import ApiTokenRow

TEAM_PREFIX = "gpuqt_"
ADMIN_PREFIX = "gpuqa_"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token(prefix: str = TEAM_PREFIX) -> str:
    return prefix + secrets.token_urlsafe(32)


def create_team_token(session: Session, team: str, description: str | None = None) -> str:
    """Add a token for ``team`` and return it in clear (the only time it is seen)."""
    token = new_token()
    session.add(
        ApiTokenRow(
            team=team, token_hash=hash_token(token), prefix=token[:12], description=description
        )
    )
    session.flush()
    return token


def team_for_token(session: Session, token: str) -> str | None:
    row = session.scalar(
        select(ApiTokenRow).where(
            ApiTokenRow.token_hash == hash_token(token), ApiTokenRow.revoked_at.is_(None)
        )
    )
    return row.team if row else None


def same_token(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())
