"""Nodes with what is free on them; writes only for static/simulated clusters."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from app.api.deps import AdminWriteDep, PrincipalDep, SessionDep, SettingsDep
from app.api.schemas import NamePath, patch_model
from app.domain.config import NodeConfig
from app.domain.errors import Conflict
from app.domain.people import for_people
from app.settings import Settings
from app.store import catalog
from app.store.orm import NodeRow
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


def _view(row: NodeRow, allocs: dict[str, list]) -> dict[str, Any]:
    return for_people({
        **catalog.node_dict(row),
        "source": row.source,
        "sharing": sharing(row),
        **node_view(row, allocs.get(row.name, [])),
    })


def _static_only(settings: Settings) -> None:
    if settings.cluster == "kubernetes":
        raise Conflict("nodes come from Kubernetes in this cluster; edit them there", "cluster")


@router.get("")
def list_nodes(session: SessionDep, _: PrincipalDep) -> list[dict[str, Any]]:
    allocs = node_allocations(session)
    return [_view(r, allocs) for r in catalog.list_named(session, NodeRow)]


@router.post("", status_code=201)
def create_node(
    body: NodeConfig, session: SessionDep, settings: SettingsDep, by: AdminWriteDep
) -> dict[str, Any]:
    _static_only(settings)
    row = catalog.create_named(session, NodeRow, body, by, source="api")
    session.commit()
    return _view(row, {})


@router.get("/{name}")
def get_node(name: NamePath, session: SessionDep, _: PrincipalDep) -> dict[str, Any]:
    row = catalog.get_named(session, NodeRow, name)
    return _view(row, node_allocations(session))


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
