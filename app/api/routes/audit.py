"""The audit trail of admin writes (admin only)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.api.deps import AdminDep, SessionDep
from app.api.schemas import AUDIT_KINDS, AuditOut
from app.store.audit import MAX_LIMIT, audit_dict, list_audit

router = APIRouter(prefix="/v1/audit", tags=["audit"])


@router.get("")
def get_audit(
    session: SessionDep,
    _: AdminDep,
    kind: AUDIT_KINDS | None = None,
    name: Annotated[str | None, Query(max_length=253)] = None,
    actor: Annotated[str | None, Query(max_length=300)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 100,
    # an id is a PostgreSQL bigint: a larger one was the database's "bigint out of range"
    before: Annotated[int | None, Query(ge=1, le=2**63 - 1,
                                        description="page back: ids below this")] = None,
) -> list[AuditOut]:
    """Newest first: who changed which quota, pool, team, token, weight, when,
    with the old and the new value."""
    rows = list_audit(session, kind=kind, name=name, actor=actor, limit=limit, before=before)
    return [AuditOut(**audit_dict(r)) for r in rows]
