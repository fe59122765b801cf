"""Nodes with what is free on them; writes only for static/simulated clusters."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.api.deps import AdminWriteDep, PrincipalDep, SessionDep, SettingsDep
from app.api.schemas import NamePath, patch_model
from app.domain.config import NodeConfig
from app.domain.errors import Conflict
from app.domain.people import for_people
from app.domain.principal import Principal
from app.settings import Settings
from app.store import catalog
from app.store.orm import JobRow, NodeRow
from app.store.usage import node_allocations, node_view

NodePatch = patch_model(NodeConfig)

router = APIRouter(prefix="/v1/nodes", tags=["nodes"])


def sharing(row: NodeRow) -> dict[str, Any]:
    """How the node's cards are handed out. A Kubernetes node: the mode its device
    plugin runs (written by the node sync), and ``device_choice: node`` (the kubelet
    picks the physical card; gpuq's device indices are its accounting). A node of the
    config or the API: gpuq's own bookkeeping is the truth (``device_choice: gpuq``)."""
    if row.source == "kubernetes" and row.sharing:
        return dict(row.sharing)
    return {"mode": "mig" if row.mig_layout else "exclusive", "offered": True,
            "device_choice": "gpuq" if row.source != "kubernetes" else "node"}


def _view(row: NodeRow, allocs: dict[str, list], viewer: Principal | None = None,
          teams: dict[int, str] | None = None) -> dict[str, Any]:
    view = node_view(row, allocs.get(row.name, []))
    if viewer is not None and not viewer.is_admin:
        # a team token sees what is used, not by which other team's job (as the UI)
        for a, out in zip(allocs.get(row.name, []), view["allocations"], strict=True):
            if (teams or {}).get(a.job_id) != viewer.team:
                out["job_id"] = None
    return for_people({
        **catalog.node_dict(row),
        "source": row.source,
        "sharing": sharing(row),
        **view,
    })


def _job_teams(session: Session, allocs: dict[str, list]) -> dict[int, str]:
    ids = {a.job_id for rows in allocs.values() for a in rows}
    if not ids:
        return {}
    return dict(session.execute(select(JobRow.id, JobRow.team).where(JobRow.id.in_(ids))).all())


def _static_only(settings: Settings) -> None:
    if settings.cluster == "kubernetes":
        raise Conflict("nodes come from Kubernetes in this cluster; edit them there", "cluster")


@router.get("")
def list_nodes(session: SessionDep, principal: PrincipalDep) -> list[dict[str, Any]]:
    """Every node with what is free on it and its allocations; for a team token,
    ``job_id`` is null on allocations of other teams' jobs."""
    allocs = node_allocations(session)
    teams = _job_teams(session, allocs)
    return [_view(r, allocs, principal, teams) for r in catalog.list_named(session, NodeRow)]


@router.post("", status_code=201)
def create_node(
    body: NodeConfig, session: SessionDep, settings: SettingsDep, by: AdminWriteDep
) -> dict[str, Any]:
    _static_only(settings)
    row = catalog.create_named(session, NodeRow, body, by, source="api")
    session.commit()
    return _view(row, {})


@router.get("/{name}")
def get_node(name: NamePath, session: SessionDep, principal: PrincipalDep) -> dict[str, Any]:
    row = catalog.get_named(session, NodeRow, name)
    allocs = node_allocations(session)
    return _view(row, allocs, principal, _job_teams(session, allocs))


@router.patch("/{name}")
def patch_node(
    name: NamePath,
    session: SessionDep,
    settings: SettingsDep,
    by: AdminWriteDep,
    patch: NodePatch,
) -> dict[str, Any]:
    _static_only(settings)
    row = catalog.get_named(session, NodeRow, name)
    row = catalog.patch_named(session, row, patch.model_dump(exclude_unset=True), by)
    session.commit()
    return _view(row, node_allocations(session))


@router.delete("/{name}", status_code=204)
def delete_node(
    name: NamePath, session: SessionDep, settings: SettingsDep, by: AdminWriteDep
) -> None:
    _static_only(settings)
    catalog.delete_named(session, catalog.get_named(session, NodeRow, name), by)
    session.commit()
