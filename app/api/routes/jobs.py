"""Jobs: submit, list, read, cancel, history. Team tokens see only their team."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Response
from pydantic import BaseModel, Field
from sqlalchemy.exc import IntegrityError

from app.api.deps import NowDep, PrincipalDep, SessionDep
from app.api.estimates import EstimatorDep
from app.api.schemas import EventOut, JobOut, JobPage, event_out, job_out
from app.domain.errors import InputError
from app.domain.spec import JobSpec
from app.store import jobs as job_store

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

def refuse_scenario_fields(specs: list[JobSpec], prefix: str | None = None) -> None:
    """422 naming the scenario-only fields (``runtime_s``...) a live submit sets."""
    for i, spec in enumerate(specs):
        bad = spec.scenario_only_fields()
        if bad:
            where = f"{prefix}.{i}." if prefix is not None else ""
            raise InputError(
                "scenario-only field(s) for `gpuq simulate`, not accepted by the service "
                "(use duration_estimate_s for the expected run time)",
                ", ".join(where + f for f in bad),
            )


IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", max_length=255)]


@router.post("", status_code=201)
def submit_job(
    spec: JobSpec,
    session: SessionDep,
    principal: PrincipalDep,
    now: NowDep,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> JobOut:
    refuse_scenario_fields([spec])
    principal.require_team(spec.team)
    try:
        sub = job_store.submit_job(session, spec, now=now, idempotency_key=idempotency_key)
        # a new job holds nothing yet: its answer needs no further reads after the commit
        out = job_out(sub.job, now) if sub.created else None
        session.commit()
        if out is not None:
            return out
    except IntegrityError:
        # a concurrent request with the same key won the race: return its job
        session.rollback()
        if idempotency_key is None:
            raise
        sub = job_store.submit_job(session, spec, now=now, idempotency_key=idempotency_key)
    if not sub.created:
        response.status_code = 200
    return job_out(sub.job, now, job_store.active_lease(session, sub.job))


class JobBatch(BaseModel):
    """Body of POST /v1/jobs:batch."""

    jobs: Annotated[list[JobSpec], Field(min_length=1, max_length=5000)]


class BatchItem(BaseModel):
    id: str
    name: str
    status: str = "pending"


class BatchOut(BaseModel):
    items: list[BatchItem]


@router.post(":batch", status_code=201)
def submit_batch(
    body: JobBatch, session: SessionDep, principal: PrincipalDep, now: NowDep
) -> BatchOut:
    """Many jobs in one transaction (all or nothing): one INSERT, one NOTIFY."""
    refuse_scenario_fields(body.jobs, prefix="jobs")
    for spec in body.jobs:
        principal.require_team(spec.team)
    ids = job_store.submit_jobs(session, body.jobs, now=now)
    session.commit()
    return BatchOut(
        items=[BatchItem(id=str(i), name=s.name) for i, s in zip(ids, body.jobs, strict=True)]
    )


@router.get("")
def list_jobs(
    session: SessionDep,
    principal: PrincipalDep,
    now: NowDep,
    team: str | None = None,
    pool: str | None = None,
    status: str | None = None,
    priority: str | None = None,
    limit: Annotated[int, Query(ge=1, le=job_store.MAX_LIMIT)] = 50,
    cursor: str | None = None,
) -> JobPage:
    if not principal.is_admin:
        if team is not None and team != principal.team:
            principal.require_team(team)
        team = principal.team
    rows, next_cursor = job_store.list_jobs(
        session,
        team=team,
        pool=pool,
        status=status,
        priority=priority,
        limit=limit,
        cursor=cursor,
    )
    leases = job_store.leases_for(session, rows)
    return JobPage(items=[job_out(r, now, leases.get(r.id)) for r in rows], next_cursor=next_cursor)


@router.get("/{job_id}")
def get_job(
    job_id: str,
    session: SessionDep,
    principal: PrincipalDep,
    now: NowDep,
    estimator: EstimatorDep,
) -> JobOut:
    job = job_store.get_job(session, job_id, team=principal.team)
    out = job_out(
        job,
        now,
        job_store.active_lease(session, job),
        released=job_store.released_placements(session, job),
    )
    if job.status == "pending":
        out.estimated_start = estimator.starts(now)(out.id)
    return out


@router.post("/{job_id}/cancel")
def cancel_job(job_id: str, session: SessionDep, principal: PrincipalDep, now: NowDep) -> JobOut:
    job = job_store.get_job(session, job_id, team=principal.team, for_update=True)
    job_store.cancel_job(session, job, now=now, by=principal.team or "admin")
    session.commit()
    return job_out(job, now, job_store.active_lease(session, job))


@router.get("/{job_id}/events")
def get_job_events(job_id: str, session: SessionDep, principal: PrincipalDep) -> list[EventOut]:
    job = job_store.get_job(session, job_id, team=principal.team)
    return [event_out(e) for e in job_store.job_events(session, job)]
