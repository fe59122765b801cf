"""Pools and their usage (guaranteed, used, borrowed, lent per GPU type)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body

from app.api.deps import AdminWriteDep, PrincipalDep, SessionDep
from app.domain.config import PoolConfig
from app.domain.people import for_people
from app.store import catalog
from app.store.orm import PoolRow
from app.store.usage import pool_usage

router = APIRouter(prefix="/v1/pools", tags=["pools"])


@router.get("")
def list_pools(session: SessionDep, _: PrincipalDep) -> list[dict[str, Any]]:
    return [catalog.pool_dict(r) for r in catalog.list_named(session, PoolRow)]


@router.post("", status_code=201)
def create_pool(body: PoolConfig, session: SessionDep, by: AdminWriteDep) -> dict[str, Any]:
    row = catalog.create_named(session, PoolRow, body, by)
    session.commit()
    return catalog.pool_dict(row)


@router.get("/{name}")
def get_pool(name: str, session: SessionDep, _: PrincipalDep) -> dict[str, Any]:
    return catalog.pool_dict(catalog.get_named(session, PoolRow, name))


@router.patch("/{name}")
def patch_pool(
    name: str, session: SessionDep, by: AdminWriteDep, patch: dict[str, Any] = Body(...)
) -> dict[str, Any]:
    row = catalog.patch_named(session, catalog.get_named(session, PoolRow, name), patch, by)
    session.commit()
    return catalog.pool_dict(row)


@router.delete("/{name}", status_code=204)
def delete_pool(name: str, session: SessionDep, by: AdminWriteDep) -> None:
    catalog.delete_named(session, catalog.get_named(session, PoolRow, name), by)
    session.commit()


@router.get("/{name}/usage")
def get_pool_usage(name: str, session: SessionDep, _: PrincipalDep) -> dict[str, Any]:
    return for_people(pool_usage(session, catalog.get_named(session, PoolRow, name)))
