"""Jobs: submit, list, read, cancel, history. Team tokens see only their team."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Connection
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from app.api import examples
from app.api.deps import (
    AdminDep,
    BearerDep,
    NowDep,
    Principal,
    PrincipalDep,
    SessionDep,
    bearer_token,
    resolve_principal,
)
from app.api.estimates import EstimatorDep
from app.api.schemas import (
    CursorQuery,
    EventOut,
    JobIdPath,
    JobOut,
    JobPage,
    NameQuery,
    PriorityQuery,
    event_out,
    job_out,
    new_job_out,
)
from app.domain.errors import InputError
from app.domain.owner import KEY_PREFIX
from app.domain.spec import JobSpec
from app.domain.states import JobStatus
from app.store import jobs as job_store
from app.store import requeue
from app.store.catalog_cache import (
    cached_catalog,
    current_catalog,
    current_catalog_of,
    refuse_unknown_filters,
)
from app.store.job_refs import JobRefs

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


@router.post(
    "",
    status_code=201,
    response_model=JobOut,
    responses={200: {"model": JobOut, "description": "the job this Idempotency-Key made before"}},
)
async def submit_job(
    spec: Annotated[JobSpec, Body(openapi_examples=examples.JOB)],
    request: Request,
    credentials: BearerDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Submit one job: 201 with the job (200 with the earlier job for a repeated
    ``Idempotency-Key`` with the same body, 409 with another body; a key beginning
    ``k8s-uid:`` is a 422, kept for the jobs of Kubernetes workloads). A
    ``pod_template`` the team's Pod policy refuses is a 422 naming the field path
    (docs/security.md), and nothing is written.

    The hot path of CI systems submitting one job per request: the body is
    parsed on the event loop, then one worker-thread hop does the token lookup
    (when not cached) and one INSERT that also writes the event and the NOTIFY,
    and the answer is built from what was written (no ORM objects, no read back).
    """
    state = request.app.state
    reserved_key(idempotency_key)
    status, body = await run_in_threadpool(
        _submit_one, state, bearer_token(credentials), spec, state.clock(), idempotency_key
    )
    return Response(body, status_code=status, media_type="application/json")


def reserved_key(key: str | None) -> None:
    """Refuse a key of the front door's form: the front door finds the job a Kubernetes
    workload made by ``k8s-uid:<uid>`` (app/dispatch/workloads.py), so a REST job with
    that key would stand for the workload, and the workload would never be queued."""
    if key is not None and key.startswith(KEY_PREFIX):
        raise InputError(f"keys beginning {KEY_PREFIX!r} are kept for the jobs gpuq makes "
                         "from Kubernetes workloads; choose another key",
                         field="Idempotency-Key")


def _submit_one(
    state: Any, token: str | None, spec: JobSpec, now: datetime, key: str | None
) -> tuple[int, bytes]:
    with state.engine.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")  # one statement
        with Session(bind=conn) as session:
            def insert(principal: Principal, at_revision: int | None = None
            ) -> job_store.NewJob | int | None:
                return job_store.insert_job(
                    conn, spec, now=now, idempotency_key=key, submitted_by=principal.name,
                    install=state.install_policy, at_revision=at_revision,
                    pending_cap=pending_cap(state, principal),
                )

            got = None
            # a cached token: no read at all, the INSERT checks the revision it is valid at
            hit = state.principals.peek(token, now) if token else None
            if hit is not None and _plainly_allowed(hit[0], spec):
                principal, revision = hit
                within_submit_rate(state, conn, principal, spec.team, 1)
                got = insert(principal, revision)
            if got is None:  # not cached, refused, or the catalog moved: resolve afresh
                principal = resolve_principal(state, session, token, now)
                principal.require_team(spec.team, write=True)
                refuse_scenario_fields([spec])
                if hit is None or not _plainly_allowed(hit[0], spec):  # else taken above
                    within_submit_rate(state, conn, principal, spec.team, 1)
                got = insert(principal)
            assert got is not None
            if isinstance(got, job_store.NewJob):
                return 201, new_job_out(got, spec.name).model_dump_json().encode()
            job = job_store.get_job(session, str(got))
            out = job_out(job, now, job_store.active_lease(session, job))
            return 200, out.model_dump_json().encode()


def within_submit_rate(
    state: Any, conn: Connection, principal: Principal, team: str, n: int
) -> None:
    """A team token's submit of ``n`` jobs for ``team`` within the team's submit rate
    (app/api/submit_rate.py), else a 429 with Retry-After. No read on the hot path: the
    team's own rate comes from the catalog this process last read. An admin's submits
    are not limited; an unknown team is left to the submit's own 422."""
    if principal.is_admin:
        return
    ref = (cached_catalog(conn.engine) or current_catalog_of(conn)).teams.get(team)
    if ref is not None:
        state.submit_rate.take(team, n, time.monotonic(), ref.submit_rate)


def pending_cap(state: Any, principal: Principal) -> int | None:
    """The cap on pending jobs a submit is held to (app/store/team_limits.py): the
    install's default for a team token (the team's own wins), none for an admin."""
    return None if principal.is_admin else state.settings.team_max_pending


def _plainly_allowed(principal: Principal, spec: JobSpec) -> bool:
    """True when the fresh path would not refuse this submit before writing (any
    refusal is left to it, so its answer, 401, 403 or 422, does not depend on a cache)."""
    return (
        principal.may_act_for(spec.team)
        and not principal.read_only
        and not spec.scenario_only_fields()
    )


class JobBatch(BaseModel):
    """Body of POST /v1/jobs:batch."""

    model_config = ConfigDict(extra="forbid")

    jobs: Annotated[list[JobSpec], Field(min_length=1, max_length=5000)]


class BatchItem(BaseModel):
    id: str
    name: str
    status: str = "pending"


class BatchOut(BaseModel):
    items: list[BatchItem]


@router.post(":batch", status_code=201, response_model=BatchOut)
async def submit_batch(
    body: Annotated[JobBatch, Body(openapi_examples=examples.BATCH)],
    request: Request,
    credentials: BearerDep,
) -> Response:
    """Many jobs in one transaction (all or nothing): one statement writes the jobs
    (as column arrays), their events and one NOTIFY."""
    state = request.app.state
    ids = await run_in_threadpool(
        _submit_many, state, bearer_token(credentials), body.jobs, state.clock()
    )
    out = BatchOut(
        items=[BatchItem(id=str(i), name=s.name) for i, s in zip(ids, body.jobs, strict=True)]
    )
    return Response(out.model_dump_json().encode(), status_code=201, media_type="application/json")


def _submit_many(
    state: Any, token: str | None, specs: list[JobSpec], now: datetime
) -> list[int]:
    with state.session_factory() as session:
        principal = resolve_principal(state, session, token, now)
        for spec in specs:
            principal.require_team(spec.team, write=True)
        refuse_scenario_fields(specs, prefix="jobs")
        per_team: dict[str, int] = {}
        for spec in specs:
            per_team[spec.team] = per_team.get(spec.team, 0) + 1
        for team, n in per_team.items():
            within_submit_rate(state, session.connection(), principal, team, n)
        ids = job_store.submit_jobs(
            session, specs, now=now, submitted_by=principal.name, install=state.install_policy,
            pending_cap=pending_cap(state, principal),
        )
        session.commit()
        return ids


@router.get("")
def list_jobs(
    session: SessionDep,
    principal: PrincipalDep,
    now: NowDep,
    estimator: EstimatorDep,
    team: NameQuery = None,
    pool: NameQuery = None,
    status: JobStatus | None = None,
    priority: PriorityQuery = None,
    limit: Annotated[int, Query(ge=1, le=job_store.MAX_LIMIT)] = 50,
    cursor: CursorQuery = None,
) -> JobPage:
    """Jobs newest first. A filter naming a team, pool or priority class that does not
    exist is a 422 with the valid names (an empty page read as "no jobs" before)."""
    if not principal.is_admin:
        if team is not None and team != principal.team:
            principal.require_team(team)
        team = principal.team
    refuse_unknown_filters(current_catalog(session), team=team, pool=pool, priority=priority)
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
    items = [job_out(r, now, leases.get(r.id)) for r in rows]
    refs = JobRefs(session, principal.team, [o.reason for o in items])
    for o in items:
        o.reason = refs.text(o.reason)
    if any(o.status == "pending" for o in items):
        start = estimator.starts(now)  # as on GET /v1/jobs/{id}: one estimate per page
        for r, o in zip(rows, items, strict=True):
            if o.status == "pending":
                o.estimated_start = start(o.id, r.reason_start_at, r.queued_at)
    return JobPage(items=items, next_cursor=next_cursor)


@router.get("/{job_id}")
def get_job(
    job_id: JobIdPath,
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
    out.reason = JobRefs(session, principal.team, [out.reason]).text(out.reason)
    if job.status == "pending":
        out.estimated_start = estimator.starts(now)(out.id, job.reason_start_at,
                                                         job.queued_at)
    return out


@router.post("/{job_id}/cancel")
def cancel_job(
    job_id: JobIdPath, session: SessionDep, principal: PrincipalDep, now: NowDep
) -> JobOut:
    job = job_store.get_job(session, job_id, team=principal.team, for_update=True)
    principal.require_team(job.team, write=True)
    job_store.cancel_job(session, job, now=now, by=principal.name)
    session.commit()
    out = job_out(job, now, job_store.active_lease(session, job))
    out.reason = JobRefs(session, principal.team, [out.reason]).text(out.reason)
    return out


@router.post("/{job_id}/requeue")
def requeue_job(job_id: JobIdPath, session: SessionDep, admin: AdminDep, now: NowDep) -> JobOut:
    """Admins only: send an ``unschedulable`` job back to the queue (after fixing
    the cluster or the config); the next cycle judges it again. 409 for a job in
    any other status. The dispatcher also does this by itself when the
    inventory changes (event ``requeued: cluster changed``)."""
    job = job_store.get_job(session, job_id, for_update=True)
    requeue.requeue_job(session, job, now=now, by="admin")
    session.commit()
    return job_out(job, now, job_store.active_lease(session, job))


@router.get("/{job_id}/events")
def get_job_events(
    job_id: JobIdPath, session: SessionDep, principal: PrincipalDep
) -> list[EventOut]:
    job = job_store.get_job(session, job_id, team=principal.team)
    events = [event_out(e) for e in job_store.job_events(session, job)]
    refs = JobRefs(session, principal.team, [e.reason for e in events],
                   [e.data.get("by_job") for e in events])
    return [e.model_copy(update={"reason": refs.text(e.reason), "data": refs.data(e.data)})
            for e in events]
