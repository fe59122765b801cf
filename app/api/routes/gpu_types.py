"""GPU types: read for everyone with a token, writes for the admin."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter
from pydantic import BaseModel

from app.api.deps import AdminWriteDep, PrincipalDep, SessionDep
from app.api.schemas import NamePath, patch_model
from app.domain.config import GpuTypeConfig
from app.store import catalog
from app.store.orm import GpuTypeRow

if TYPE_CHECKING:  # a class built at run time: to the checker, the BaseModel it is
    GpuTypePatch = BaseModel
else:
    GpuTypePatch = patch_model(GpuTypeConfig)

router = APIRouter(prefix="/v1/gpu-types", tags=["gpu-types"])


@router.get("")
def list_gpu_types(session: SessionDep, _: PrincipalDep) -> list[dict[str, Any]]:
    return [catalog.gpu_type_dict(r) for r in catalog.list_named(session, GpuTypeRow)]


@router.post("", status_code=201)
def create_gpu_type(body: GpuTypeConfig, session: SessionDep, by: AdminWriteDep) -> dict[str, Any]:
    row = catalog.create_named(session, GpuTypeRow, body, by)
    session.commit()
    return catalog.gpu_type_dict(row)


@router.get("/{name}")
def get_gpu_type(name: NamePath, session: SessionDep, _: PrincipalDep) -> dict[str, Any]:
    return catalog.gpu_type_dict(catalog.get_named(session, GpuTypeRow, name))


@router.patch("/{name}")
def patch_gpu_type(
    name: NamePath, session: SessionDep, by: AdminWriteDep, patch: GpuTypePatch
) -> dict[str, Any]:
    row = catalog.get_named(session, GpuTypeRow, name)
    row = catalog.patch_named(session, row, patch.model_dump(exclude_unset=True), by)
    session.commit()
    return catalog.gpu_type_dict(row)


@router.delete("/{name}", status_code=204)
def delete_gpu_type(name: NamePath, session: SessionDep, by: AdminWriteDep) -> None:
    catalog.delete_named(session, catalog.get_named(session, GpuTypeRow, name), by)
    session.commit()
