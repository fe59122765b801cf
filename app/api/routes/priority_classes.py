"""The priority table (P0/P1/P2 by default; sites may add their own)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from app.api.deps import AdminWriteDep, PrincipalDep, SessionDep
from app.api.schemas import PriorityNamePath
from app.domain.config import PriorityClassConfig
from app.domain.errors import Conflict
from app.store import catalog
from app.store.orm import PriorityClassRow

router = APIRouter(prefix="/v1/priority-classes", tags=["priority-classes"])


@router.get("")
def list_priority_classes(session: SessionDep, _: PrincipalDep) -> list[dict[str, Any]]:
    rows = sorted(catalog.list_named(session, PriorityClassRow), key=lambda r: -r.value)
    return [catalog.priority_dict(r) for r in rows]


@router.post("", status_code=201)
def create_priority_class(
    body: PriorityClassConfig, session: SessionDep, by: AdminWriteDep
) -> dict[str, Any]:
    # Pods get the class "<prefix><name lower-cased>": P0 and p0 would be one class
    for other in catalog.list_named(session, PriorityClassRow):
        if other.name != body.name and other.name.lower() == body.name.lower():
            raise Conflict(
                f"priority class {other.name!r} already has the Kubernetes name of "
                f"{body.name!r} (names are compared lower-cased)",
                "name",
            )
    row = catalog.create_named(session, PriorityClassRow, body, by)
    session.commit()
    return catalog.priority_dict(row)


@router.get("/{name}")
def get_priority_class(
    name: PriorityNamePath, session: SessionDep, _: PrincipalDep
) -> dict[str, Any]:
    return catalog.priority_dict(catalog.get_named(session, PriorityClassRow, name))


@router.delete("/{name}", status_code=204)
def delete_priority_class(name: PriorityNamePath, session: SessionDep, by: AdminWriteDep) -> None:
    """Refused (409) while a team's default_priority or any job names it."""
    catalog.delete_named(session, catalog.get_named(session, PriorityClassRow, name), by)
    session.commit()
