"""Who calls the API: scopes of tokens and JWTs (docs/security.md).

A scope is ``admin``, ``team:<name>`` (submit, list, cancel the team's own
jobs; read the cluster, pools and queue) or ``team:<name>:read`` (the same
reads, no writes). API tokens carry one scope; a JWT's groups map to one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.domain.errors import Forbidden, InputError

ADMIN_SCOPE = "admin"
_TEAM_SCOPE = re.compile(r"^team:([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)(:read)?$")


def parse_scope(scope: str, field: str = "scope") -> tuple[str | None, bool]:
    """``(team or None for admin, read_only)``; anything else is an :class:`InputError`."""
    if scope == ADMIN_SCOPE:
        return None, False
    m = _TEAM_SCOPE.fullmatch(scope)
    if m is None:
        raise InputError(
            f"{scope!r} is not a scope: use 'admin', 'team:<name>' or 'team:<name>:read'", field
        )
    return m.group(1), m.group(3) is not None


def team_scope(team: str, read_only: bool = False) -> str:
    return f"team:{team}" + (":read" if read_only else "")


@dataclass(frozen=True)
class Principal:
    """The caller: ``name`` is what ``submitted_by`` and the audit trail record
    (``token:<name>`` or ``oidc:<subject>``); ``team is None`` means admin."""

    team: str | None
    name: str = "admin"
    read_only: bool = False

    @classmethod
    def from_scope(cls, scope: str, name: str) -> Principal:
        team, read_only = parse_scope(scope)
        return cls(team=team, name=name, read_only=read_only)

    @property
    def scope(self) -> str:
        return ADMIN_SCOPE if self.team is None else team_scope(self.team, self.read_only)

    @property
    def is_admin(self) -> bool:
        return self.team is None

    def may_act_for(self, team: str) -> bool:
        return self.is_admin or self.team == team

    def require_team(self, team: str, field: str = "team", *, write: bool = False) -> None:
        """Refuse (403) acting for another team, and writing with a read-only scope."""
        if not self.may_act_for(team):
            raise Forbidden(f"a token of team {self.team} may not act for team {team!r}", field)
        if write and self.read_only:
            raise Forbidden(f"scope {self.scope} is read-only", "Authorization")
