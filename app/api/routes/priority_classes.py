"""The priority table (P0/P1/P2 by default; sites may add their own)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from app.api.deps import AdminDep, PrincipalDep, SessionDep
from app.domain.config import PriorityClassConfig
from app.store import catalog
from app.store.orm import PriorityClassRow

router = APIRouter(prefix="/v1/priority-classes", tags=["priority-classes"])


@router.get("")
def list_priority_classes(session: SessionDep, _: PrincipalDep) -> list[dict[str, Any]]:
    rows = sorted(catalog.list_named(session, PriorityClassRow), key=lambda r: -r.value)
    return [catalog.priority_dict(r) for r in rows]


@router.post("", status_code=201)
def create_priority_class(
    body: PriorityClassConfig, session: SessionDep, _: AdminDep
) -> dict[str, Any]:
    row = catalog.create_named(session, PriorityClassRow, body)
    session.commit()
    return catalog.priority_dict(row)


@router.get("/{name}")
def get_priority_class(name: str, session: SessionDep, _: PrincipalDep) -> dict[str, Any]:
    return catalog.priority_dict(catalog.get_named(session, PriorityClassRow, name))


@router.delete("/{name}", status_code=204)
def delete_priority_class(name: str, session: SessionDep, _: AdminDep) -> None:
    """Refused (409) while a team's default_priority or any job names it."""
    catalog.delete_named(session, catalog.get_named(session, PriorityClassRow, name))
    session.commit()
