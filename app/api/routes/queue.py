"""The pending queue in dispatch order (as the last dispatcher cycle ranked it)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from app.api.deps import NowDep, PrincipalDep, SessionDep
from app.api.estimates import EstimatorDep
from app.api.paging import NEXT_HEADERS, link_next_page
from app.api.schemas import CursorQuery, NameQuery, QueueItem
from app.store import jobs as job_store
from app.store.catalog_cache import current_catalog, refuse_unknown_filters
from app.store.job_refs import JobRefs
from app.store.queue_order import QueueCursor, queue_page
from app.store.state_changes import wait_seconds

router = APIRouter(prefix="/v1/queue", tags=["queue"])

MAX_LIMIT = 500
# pending jobs of other teams a team token's answer leaves out (same pool filter)
OTHER_TEAMS_HEADER = "X-Queue-Other-Teams"


@router.get("", responses={200: {"headers": NEXT_HEADERS}})
def get_queue(
    request: Request,
    response: Response,
    session: SessionDep,
    principal: PrincipalDep,
    now: NowDep,
    estimator: EstimatorDep,
    pool: NameQuery = None,
    team: NameQuery = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="jobs per page")] = 100,
    cursor: CursorQuery = None,
) -> list[QueueItem]:
    """Pending jobs in dispatch order, a page at a time (keyset: ``limit`` and ``cursor``).

    The body stays a list (what clients of the unpaged queue read); the next
    page's cursor comes in the ``X-Next-Cursor`` and ``Link`` headers.

    A team token sees only its own team's entries; their positions are their
    places in the ONE queue as the last cycle ranked it, and the other teams'
    entries are counted in ``X-Queue-Other-Teams``, never shown.

    A ``team`` or ``pool`` that does not exist is a 422 with the valid names.
    """
    own_team = principal.team  # None: an admin token, which sees every team
    team_view = own_team is not None
    if own_team is not None and team is not None and team != own_team:
        if cursor:  # a malformed cursor is a 422 whatever the filter (not read otherwise)
            QueueCursor.decode(cursor)
        return []  # nothing of another team is visible to this token
    # an unknown team or pool is a 422 with the valid names, as GET /v1/jobs answers (an
    # empty queue read as "nothing waits" and `gpuq queue --team vision` exited 0)
    refuse_unknown_filters(current_catalog(session), team=team, pool=pool)
    if own_team is not None:
        team = own_team
        response.headers[OTHER_TEAMS_HEADER] = str(
            job_store.pending_count_of_others(session, team=team, pool=pool)
        )
    rows, first, next_cursor = queue_page(
        session.connection(), limit=limit, cursor=cursor, pool=pool, team=team
    )
    link_next_page(request, response, next_cursor)
    start_of = estimator.starts(now)
    refs = JobRefs(session, own_team, [j.reason for j in rows])
    return [
        QueueItem(
            position=j.ord if team_view and j.ord is not None else first + i,
            id=str(j.id),
            name=j.name,
            team=j.team,
            pool=j.pool,
            priority=j.priority,
            submitted_at=j.submitted_at,
            wait_seconds=round(wait_seconds(j, now), 3),
            reason=refs.text(j.reason),
            reason_code=j.reason_code,
            preemption_count=j.preemption_count,
            estimated_start=start_of(str(j.id), j.reason_start_at, j.queued_at),
        )
        for i, j in enumerate(rows)
    ]
