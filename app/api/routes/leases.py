"""Borrow leases (a pool above its guarantee, on another pool's idle CU)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from sqlalchemy import select

from app.api.deps import PrincipalDep, SessionDep
from app.api.schemas import LeaseOut, NameQuery, lease_out
from app.store.orm import JobRow, LeaseRow

router = APIRouter(prefix="/v1/leases", tags=["leases"])


@router.get("")
def list_leases(
    session: SessionDep,
    principal: PrincipalDep,
    state: Literal["active", "returned", "reclaimed"] | None = None,
    pool: NameQuery = None,
) -> list[LeaseOut]:
    """Borrow leases between pools; for a team token, ``job_id`` is null on leases of
    other teams' jobs (pools are shared, jobs are not)."""
    q = (select(LeaseRow, JobRow.team).join(JobRow, JobRow.id == LeaseRow.job_id)
         .order_by(LeaseRow.id))
    if state:
        q = q.where(LeaseRow.state == state)
    if pool:
        q = q.where((LeaseRow.borrower == pool) | (LeaseRow.lender == pool))
    out = []
    for lease, team in session.execute(q):
        item = lease_out(lease)
        if not principal.may_act_for(team):
            item.job_id = None
        out.append(item)
    return out
