"""The pending queue in dispatch order (as the last dispatcher cycle ranked it)."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import NowDep, PrincipalDep, SessionDep
from app.api.estimates import EstimatorDep
from app.api.schemas import QueueItem
from app.store import jobs as job_store
from app.store.states import wait_seconds

router = APIRouter(prefix="/v1/queue", tags=["queue"])


@router.get("")
def get_queue(
    session: SessionDep,
    _: PrincipalDep,
    now: NowDep,
    estimator: EstimatorDep,
    pool: str | None = None,
    team: str | None = None,
) -> list[QueueItem]:
    rows = job_store.pending_queue(session, pool=pool, team=team)
    start_of = estimator.starts(now)
    return [
        QueueItem(
            position=i + 1,
            id=str(j.id),
            name=j.name,
            team=j.team,
            pool=j.pool,
            priority=j.priority,
            submitted_at=j.submitted_at,
            wait_seconds=round(wait_seconds(j, now), 3),
            reason=j.reason,
            preemption_count=j.preemption_count,
            estimated_start=start_of(str(j.id)),
        )
        for i, j in enumerate(rows)
    ]
