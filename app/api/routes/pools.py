"""Pools and their usage (guaranteed, used, borrowed, lent per GPU type)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Body
from pydantic import BaseModel

from app.api import examples
from app.api.deps import AdminWriteDep, PrincipalDep, SessionDep
from app.api.schemas import NamePath, patch_model
from app.domain.config import PoolConfig
from app.domain.people import for_people
from app.store import catalog
from app.store.orm import PoolRow
from app.store.usage import pool_usage

if TYPE_CHECKING:  # a class built at run time: to the checker, the BaseModel it is
    PoolPatch = BaseModel
else:
    PoolPatch = patch_model(PoolConfig)

router = APIRouter(prefix="/v1/pools", tags=["pools"])


@router.get("")
def list_pools(session: SessionDep, _: PrincipalDep) -> list[dict[str, Any]]:
    return [catalog.pool_dict(r) for r in catalog.list_named(session, PoolRow)]


@router.post("", status_code=201)
def create_pool(
    body: Annotated[PoolConfig, Body(openapi_examples=examples.POOL)],
    session: SessionDep,
    by: AdminWriteDep,
) -> dict[str, Any]:
    row = catalog.create_named(session, PoolRow, body, by)
    session.commit()
    return catalog.pool_dict(row)


@router.get("/{name}")
def get_pool(name: NamePath, session: SessionDep, _: PrincipalDep) -> dict[str, Any]:
    return catalog.pool_dict(catalog.get_named(session, PoolRow, name))


@router.patch("/{name}")
def patch_pool(
    name: NamePath, session: SessionDep, by: AdminWriteDep, patch: PoolPatch
) -> dict[str, Any]:
    row = catalog.get_named(session, PoolRow, name)
    row = catalog.patch_named(session, row, patch.model_dump(exclude_unset=True), by)
    session.commit()
    return catalog.pool_dict(row)


@router.delete("/{name}", status_code=204)
def delete_pool(name: NamePath, session: SessionDep, by: AdminWriteDep) -> None:
    catalog.delete_named(session, catalog.get_named(session, PoolRow, name), by)
    session.commit()


@router.get("/{name}/usage")
def get_pool_usage(name: NamePath, session: SessionDep, principal: PrincipalDep) -> dict[str, Any]:
    """Per GPU type: guaranteed, used, borrowed, lent; the active leases, whose
    ``job_id`` is null for a team token on leases of other teams' jobs."""
    pool = catalog.get_named(session, PoolRow, name)
    return for_people(pool_usage(session, pool, principal.may_act_for))
