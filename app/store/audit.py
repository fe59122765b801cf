"""The audit trail of admin writes (``GET /v1/audit``): who changed which object,
when, its old and its new value. Written in the transaction of the change
itself, so a change and its record commit (or roll back) together."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.store.orm import AuditRow

MAX_LIMIT = 500


@dataclass(frozen=True)
class WriteBy:
    """Who writes, and when: what an audited store write records."""

    actor: str
    at: datetime

    def record(
        self,
        session: Session,
        action: str,
        kind: str,
        name: str,
        old: dict[str, Any] | None = None,
        new: dict[str, Any] | None = None,
    ) -> None:
        """One audit row; the caller commits with the change it describes."""
        session.add(
            AuditRow(at=self.at, actor=self.actor, action=action, kind=kind, name=name,
                     old=_jsonable(old), new=_jsonable(new))
        )


def _jsonable(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is None:
        return None
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in value.items()}


def list_audit(
    session: Session,
    *,
    kind: str | None = None,
    name: str | None = None,
    actor: str | None = None,
    limit: int = 100,
    before: int | None = None,
) -> list[AuditRow]:
    """Newest first; ``before`` (an id) pages back."""
    q = select(AuditRow).order_by(AuditRow.id.desc()).limit(limit)
    if kind is not None:
        q = q.where(AuditRow.kind == kind)
    if name is not None:
        q = q.where(AuditRow.name == name)
    if actor is not None:
        q = q.where(AuditRow.actor == actor)
    if before is not None:
        q = q.where(AuditRow.id < before)
    return list(session.scalars(q))


def audit_dict(r: AuditRow) -> dict[str, Any]:
    return {"id": r.id, "at": r.at, "actor": r.actor, "action": r.action, "kind": r.kind,
            "name": r.name, "old": r.old, "new": r.new}
