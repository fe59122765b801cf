"""Borrow leases (a pool above its guarantee, on another pool's idle CU)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from sqlalchemy import select

from app.api.deps import PrincipalDep, SessionDep
from app.api.schemas import LeaseOut, NameQuery, lease_out
from app.store.orm import LeaseRow

router = APIRouter(prefix="/v1/leases", tags=["leases"])


@router.get("")
def list_leases(
    session: SessionDep,
    _: PrincipalDep,
    state: Literal["active", "returned", "reclaimed"] | None = None,
    pool: NameQuery = None,
) -> list[LeaseOut]:
    q = select(LeaseRow).order_by(LeaseRow.id)
    if state:
        q = q.where(LeaseRow.state == state)
    if pool:
        q = q.where((LeaseRow.borrower == pool) | (LeaseRow.lender == pool))
    return [lease_out(r) for r in session.scalars(q)]
