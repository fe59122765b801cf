"""Borrow leases (a pool above its guarantee, on another pool's idle CU)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response
from sqlalchemy import select

from app.api.deps import PrincipalDep, SessionDep
from app.api.paging import NEXT_HEADERS, link_next_page
from app.api.schemas import CursorQuery, LeaseOut, NameQuery, lease_out
from app.store.catalog_cache import current_catalog, refuse_unknown_filters
from app.store.jobs import decode_cursor, encode_cursor
from app.store.orm import JobRow, LeaseRow

router = APIRouter(prefix="/v1/leases", tags=["leases"])

MAX_LIMIT = 500


@router.get("", responses={200: {"headers": NEXT_HEADERS}})
def list_leases(
    request: Request,
    response: Response,
    session: SessionDep,
    principal: PrincipalDep,
    state: Literal["active", "returned", "reclaimed"] | None = None,
    pool: NameQuery = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="leases per page")] = MAX_LIMIT,
    cursor: CursorQuery = None,
) -> list[LeaseOut]:
    """Borrow leases between pools, oldest first, a page at a time; for a team token,
    ``job_id`` is null on leases of other teams' jobs (pools are shared, jobs are not).
    A ``pool`` that does not exist is a 422 with the valid names, as GET /v1/jobs answers.

    Returned and reclaimed leases stay as history, so an answer is at most ``limit``
    leases (before: every lease ever made, in one answer); the body stays a list and the
    next page's cursor comes in the ``X-Next-Cursor`` and ``Link`` headers, as
    GET /v1/queue's. ``state=active`` reads only the active ones (an index)."""
    refuse_unknown_filters(current_catalog(session), pool=pool)
    q = (select(LeaseRow, JobRow.team).join(JobRow, JobRow.id == LeaseRow.job_id)
         .order_by(LeaseRow.id).limit(limit + 1))
    if cursor:
        q = q.where(LeaseRow.id > decode_cursor(cursor))
    if state:
        q = q.where(LeaseRow.state == state)
    if pool:
        q = q.where((LeaseRow.borrower == pool) | (LeaseRow.lender == pool))
    rows = session.execute(q).all()
    if len(rows) > limit:
        rows = rows[:limit]
        link_next_page(request, response, encode_cursor(rows[-1][0].id))
    out = []
    for lease, team in rows:
        item = lease_out(lease)
        if not principal.may_act_for(team):
            item.job_id = None
        out.append(item)
    return out
