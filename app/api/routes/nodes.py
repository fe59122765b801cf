"""Nodes with what is free on them; definition writes only for static/simulated
clusters; cordon, uncordon and drain on every node (operational state, app/store/cordon.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Body
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.api.deps import AdminWriteDep, PrincipalDep, SessionDep, SettingsDep
from app.api.schemas import NamePath, patch_model
from app.domain.config import NodeConfig
from app.domain.errors import Conflict
from app.domain.people import for_people
from app.domain.principal import Principal
from app.domain.spec import Text
from app.settings import Settings
from app.store import catalog
from app.store.cordon import REASON_MAX, cordon_node, cordon_view, uncordon_node
from app.store.orm import JobRow, NodeRow
from app.store.usage import node_allocations, node_view

if TYPE_CHECKING:  # a class built at run time: to the checker, the BaseModel it is
    NodePatch = BaseModel
else:
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
        **cordon_view(row),
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
    changes = patch.model_dump(exclude_unset=True)
    row = catalog.get_named(session, NodeRow, name)
    if set(changes) == {"schedulable"} and changes["schedulable"] is not None:
        # being schedulable is operational state (as kubectl cordon), not the node's
        # definition: a cordon on any node, whoever defined it
        if changes["schedulable"]:
            uncordon_node(session, row, by)
            if not row.managed_by and row.source != "kubernetes" and not row.schedulable:
                row = catalog.patch_named(session, row, changes, by)  # its API definition
        else:
            cordon_node(session, row, by)
        session.commit()
        return _view(row, node_allocations(session))
    _static_only(settings)
    row = catalog.patch_named(session, row, changes, by)
    session.commit()
    return _view(row, node_allocations(session))


@router.delete("/{name}", status_code=204)
def delete_node(
    name: NamePath, session: SessionDep, settings: SettingsDep, by: AdminWriteDep
) -> None:
    _static_only(settings)
    catalog.delete_named(session, catalog.get_named(session, NodeRow, name), by)
    session.commit()


class CordonBody(BaseModel):
    """Why the node is taken out of service (shown on the node and in the audit trail)."""

    model_config = ConfigDict(extra="forbid")
    reason: Text | None = Field(None, max_length=REASON_MAX,
                               examples=["replacing a failed fan"])


@router.post("/{name}/cordon")
def cordon(
    name: NamePath, session: SessionDep, by: AdminWriteDep,
    body: CordonBody | None = Body(None),
) -> dict[str, Any]:
    """Admins: take the node out of service for new jobs (what runs there keeps running),
    on any node whoever defined it; a config apply or node sync leaves the cordon alone."""
    row = catalog.get_named(session, NodeRow, name)
    cordon_node(session, row, by, body.reason if body else None)
    session.commit()
    return _view(row, node_allocations(session))


@router.post("/{name}/drain")
def drain(
    name: NamePath, session: SessionDep, by: AdminWriteDep,
    body: CordonBody | None = Body(None),
) -> dict[str, Any]:
    """Admins: cordon the node and stop the jobs running there; the dispatcher requeues
    them (with their submit time, as a preemption) within its next pass. Uncordon ends it."""
    row = catalog.get_named(session, NodeRow, name)
    cordon_node(session, row, by, body.reason if body else None, drain=True)
    session.commit()
    return _view(row, node_allocations(session))


@router.post("/{name}/uncordon")
def uncordon(name: NamePath, session: SessionDep, by: AdminWriteDep) -> dict[str, Any]:
    """Admins: put the node back in service (ends a drain too)."""
    row = catalog.get_named(session, NodeRow, name)
    uncordon_node(session, row, by)
    session.commit()
    return _view(row, node_allocations(session))
