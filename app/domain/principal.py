"""Who calls the API: scopes of tokens and JWTs (docs/security.md).

A scope is ``admin``, ``team:<name>`` (submit, list, cancel the team's own
jobs; read the cluster, pools and queue), ``team:<name>:read`` (the same
reads, no writes) or ``metrics`` (a Prometheus scraper: ``GET /metrics`` with
every team's series, and nothing else). API tokens carry one scope; a JWT's
groups map to one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.domain.errors import Forbidden, InputError

ADMIN_SCOPE = "admin"
METRICS_SCOPE = "metrics"
_TEAM_SCOPE = re.compile(r"^team:([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)(:read)?$")


def parse_scope(scope: str, field: str = "scope") -> tuple[str | None, bool]:
    """``(team, read_only)``: ``(None, False)`` for admin, ``(None, True)`` for metrics;
    anything else is an :class:`InputError`."""
    if scope == ADMIN_SCOPE:
        return None, False
    if scope == METRICS_SCOPE:
        return None, True
    m = _TEAM_SCOPE.fullmatch(scope)
    if m is None:
        raise InputError(
            f"{scope!r} is not a scope: use 'admin', 'team:<name>', 'team:<name>:read' "
            "or 'metrics'", field
        )
    return m.group(1), m.group(3) is not None


def team_scope(team: str, read_only: bool = False) -> str:
    return f"team:{team}" + (":read" if read_only else "")


@dataclass(frozen=True)
class Principal:
    """The caller: ``name`` is what ``submitted_by`` and the audit trail record
    (``token:<name>`` or ``oidc:<subject>``); ``team is None`` means admin, unless
    ``metrics_only``: the ``metrics`` scope, which reads ``GET /metrics`` (every team's
    series) and is refused everywhere else (app/api/deps.py ``resolve_principal``)."""

    team: str | None
    name: str = "admin"
    read_only: bool = False
    metrics_only: bool = False

    @classmethod
    def from_scope(cls, scope: str, name: str) -> Principal:
        team, read_only = parse_scope(scope)
        return cls(team=team, name=name, read_only=read_only,
                   metrics_only=scope == METRICS_SCOPE)

    @property
    def scope(self) -> str:
        if self.metrics_only:
            return METRICS_SCOPE
        return ADMIN_SCOPE if self.team is None else team_scope(self.team, self.read_only)

    @property
    def is_admin(self) -> bool:
        return self.team is None and not self.metrics_only

    @property
    def sees_every_team(self) -> bool:
        """Reads every team's figures: the admin and the ``metrics`` scope."""
        return self.team is None

    def may_act_for(self, team: str) -> bool:
        return self.is_admin or (self.team is not None and self.team == team)

    def require_team(self, team: str, field: str = "team", *, write: bool = False) -> None:
        """Refuse (403) acting for another team, and writing with a read-only scope."""
        if not self.may_act_for(team):
            raise Forbidden(f"a token of team {self.team} may not act for team {team!r}", field)
        if write and self.read_only:
            raise Forbidden(f"scope {self.scope} is read-only", "Authorization")
