"""The pending queue in dispatch order (as the last dispatcher cycle ranked it)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from app.api.deps import NowDep, PrincipalDep, SessionDep
from app.api.schemas import QueueItem
from app.store import jobs as job_store
from app.store.states import wait_seconds

router = APIRouter(prefix="/v1/queue", tags=["queue"])

# pending jobs of other teams the answer leaves out (same pool filter)
OTHER_TEAMS_HEADER = "X-Queue-Other-Teams"


@router.get("")
def get_queue(
    session: SessionDep,
    principal: PrincipalDep,
    now: NowDep,
    response: Response,
    pool: str | None = None,
    team: str | None = None,
) -> list[QueueItem]:
    """Pending jobs in dispatch order. Positions are places in the ONE queue; a
    team token sees only its own team's entries (the others are counted: in the
    positions, and in the ``X-Queue-Other-Teams`` header), never their names."""
    if not principal.is_admin:
        if team is not None and team != principal.team:
            return []  # nothing of another team is visible to this token
        team = principal.team
    rows, others = job_store.pending_queue_positions(session, pool=pool, team=team)
    response.headers[OTHER_TEAMS_HEADER] = str(others)
    return [
        QueueItem(
            position=position,
            id=str(j.id),
            name=j.name,
            team=j.team,
            pool=j.pool,
            priority=j.priority,
            submitted_at=j.submitted_at,
            wait_seconds=round(wait_seconds(j, now), 3),
            reason=j.reason,
            preemption_count=j.preemption_count,
        )
        for position, j in rows
    ]
