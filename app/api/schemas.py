"""Response shapes of the REST API (field names are docs/api.md's contract; add, never rename).

Every timestamp field is :data:`~app.domain.people.UtcTime` (ISO 8601 UTC to
the second) and every computed number :data:`~app.domain.people.Rounded`:
one serializer for the whole API (app/domain/people.py).

Request bodies reuse the domain models (``JobSpec`` and the config file's
models), so curl, a scenario file and a config file are validated alike.
"""

from __future__ import annotations

from copy import copy
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import Path, Query
from pydantic import BaseModel, Field, create_model

from app.domain.owner import owner_of
from app.domain.people import Rounded, UtcTime
from app.domain.spec import DNS_LABEL_PATTERN, JOB_ID_PATTERN, PRIORITY_NAME_PATTERN
from app.scheduling.verdicts import ReasonCode
from app.store.convert import ALLOCATION_AS_IS, LEASE_AS_IS, copied
from app.store.jobs import NewJob
from app.store.orm import AllocationRow, JobEventRow, JobRow, LeaseRow
from app.store.state_changes import wait_seconds

# Path parameters naming an object. The pattern documents which names can exist (a
# name that cannot is simply not found: 404), so a client or a fuzzer knows the shape.
NamePath = Annotated[
    str,
    Path(description="the object's name (a DNS label)",
         json_schema_extra={"pattern": DNS_LABEL_PATTERN, "minLength": 1, "maxLength": 63}),
]
PriorityNamePath = Annotated[
    str,
    Path(description="the priority class's name",
         json_schema_extra={"pattern": PRIORITY_NAME_PATTERN, "minLength": 1, "maxLength": 63}),
]
JobIdPath = Annotated[
    str,
    Path(description="the job's id",
         json_schema_extra={"pattern": JOB_ID_PATTERN}),
]


# Query filters naming an object: refused (422) when no object could have that name,
# as the document says, rather than answering an empty list.
NameQuery = Annotated[
    str | None,
    Query(description="only this object's (a DNS label)", pattern=DNS_LABEL_PATTERN,
          min_length=1, max_length=63),
]
PriorityQuery = Annotated[
    str | None,
    Query(description="only this priority class's", pattern=PRIORITY_NAME_PATTERN,
          min_length=1, max_length=63),
]
CursorQuery = Annotated[
    str | None,
    Query(description="the next_cursor (X-Next-Cursor) of the previous page, as given "
          "(empty: the first page; anything else is refused: 422 'malformed cursor')",
          json_schema_extra={"pattern": "^[A-Za-z0-9_-]{0,200}={0,2}$"}),
]
AUDIT_KINDS = Literal[
    "gpu_type", "node", "pool", "team", "priority_class", "token", "tuning", "config"
]


def _no_default(extra: Any) -> Any:
    """A PATCH field has no default: absent means unchanged (the document must not
    say ``"default": null`` for a field that refuses null)."""

    def schema(s: dict[str, Any]) -> None:
        if isinstance(extra, dict):
            s.update(extra)
        elif callable(extra):
            extra(s)
        s.pop("default", None)

    return schema


def patch_model(model: type[BaseModel]) -> type[BaseModel]:
    """The PATCH body of a catalog object: any of ``model``'s fields but the name
    (names never change), none required, each with its own type and bounds; unknown
    fields are refused. The merged object is validated again as a whole."""
    fields: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if name == "name":
            continue
        optional = copy(field)
        optional.default = None  # absent: unchanged (an explicit null only where allowed)
        optional.default_factory = None
        optional.json_schema_extra = _no_default(field.json_schema_extra)
        fields[name] = (field.annotation, optional)
    title = model.__name__.removesuffix("Config") + "Patch"
    return create_model(
        title,
        __config__=model.model_config,
        __doc__=f"Any fields of {model.__name__} but the name; the rest keep their values.",
        **fields,
    )


class AllocationOut(BaseModel):
    replica: int
    node: str
    gpu_type: str | None
    gpus: list[int] = Field(description=(
        "the card slots gpuq booked on the node. On a Kubernetes node the kubelet and the "
        "device plugin pick the physical cards (the node's `sharing.device_choice` is "
        "`node` in GET /v1/nodes): these indices count what is taken, they do not name "
        "the card the container sees"))
    mig: list[list[Any]] = Field(description=(
        "[card slot, slice, profile] per MIG slice; on Kubernetes the device plugin picks "
        "the physical slice of that profile"))
    units: Rounded
    share: Rounded = 0.0
    cpu: Rounded = 0.0
    memory_gb: Rounded = 0.0
    # true for a finished job: what it held, already given back
    released: bool = False


class LeaseOut(BaseModel):
    id: str
    borrower: str
    lender: str
    gpu_type: str
    units: Rounded
    job_id: str | None = Field(
        description="the borrowing job; null for a team token when it is another team's")
    started_at: UtcTime
    expires_at: UtcTime
    state: str
    ended_at: UtcTime | None = None


class OwnerOut(BaseModel):
    """The Kubernetes workload a job came from (the Kubernetes front door)."""

    api_version: str = Field(description="`batch/v1`, `jobset.x-k8s.io/v1alpha2`")
    kind: str = Field(description="`Job`, `JobSet`, `PyTorchJob`")
    namespace: str
    name: str
    uid: str


def owner_out(submitted_by: str | None, idempotency_key: str | None) -> OwnerOut | None:
    o = owner_of(submitted_by, idempotency_key)
    if o is None:
        return None
    return OwnerOut(api_version=o.api_version, kind=o.kind, namespace=o.namespace,
                    name=o.name, uid=o.uid)


# the code of a reason beside its message (add codes, never rename them)
REASON_CODE_DOC = (
    "why, as a stable code to group or match on (the reason's words may change): "
    + ", ".join(c.value for c in ReasonCode)
    + "; null when the reason is not the scheduler's (a failure, a cancel, a refused bind)"
)


class JobOut(BaseModel):
    id: str
    name: str
    team: str
    pool: str
    priority: str
    status: str
    reason: str | None
    submitted_at: UtcTime
    admitted_at: UtcTime | None
    started_at: UtcTime | None
    finished_at: UtcTime | None
    wait_seconds: Rounded
    preemption_count: int
    units: Rounded | None
    allocations: list[AllocationOut]
    lease: LeaseOut | None
    spec: dict[str, Any]
    queue_position: int | None = None
    # who submitted it: ``token:<name>`` or ``oidc:<subject>`` (None: before 0004)
    submitted_by: str | None = None
    # pending jobs: the start the pending reason names (jobs.reason_start_at), else when
    # the core, replayed forward from now, would start it (None: not within the replay's
    # bounds, or not pending)
    estimated_start: UtcTime | None = None
    # a job queued from a Kubernetes workload (Job, JobSet, PyTorchJob); None for REST jobs
    owner: OwnerOut | None = None
    reason_code: str | None = Field(default=None, description=REASON_CODE_DOC)


class JobPage(BaseModel):
    items: list[JobOut]
    next_cursor: str | None


class EventOut(BaseModel):
    id: str
    job_id: str
    at: UtcTime
    type: str
    from_status: str | None
    to_status: str | None
    reason: str | None
    data: dict[str, Any]
    reason_code: str | None = Field(default=None, description=REASON_CODE_DOC)


class QueueItem(BaseModel):
    position: int
    id: str
    name: str
    team: str
    pool: str
    priority: str
    submitted_at: UtcTime
    wait_seconds: Rounded
    reason: str | None
    preemption_count: int
    estimated_start: UtcTime | None = None
    reason_code: str | None = Field(default=None, description=REASON_CODE_DOC)


class TokenOut(BaseModel):
    """A new token: ``token`` is shown in this answer only (gpuq keeps its hash)."""

    team: str | None
    token: str
    prefix: str
    id: int
    name: str
    scope: str
    expires_at: UtcTime | None = None


class TokenInfo(BaseModel):
    """A token as listed: never its value."""

    id: int
    name: str
    scope: str
    team: str | None
    prefix: str
    description: str | None
    created_at: UtcTime
    created_by: str | None
    expires_at: UtcTime | None
    revoked_at: UtcTime | None
    state: str  # active | expired | revoked


class AuditOut(BaseModel):
    """One admin write: who (token name or OIDC subject), what, when, old and new value."""

    id: int
    at: UtcTime
    actor: str
    action: str  # create | update | delete | revoke | rotate | apply
    kind: str  # team | pool | gpu_type | node | priority_class | token | tuning | config
    name: str
    old: dict[str, Any] | None
    new: dict[str, Any] | None


def allocation_out(a: AllocationRow) -> AllocationOut:
    return AllocationOut(
        **copied(a, ALLOCATION_AS_IS),
        gpus=[int(d) for d in a.devices] if not a.mig else [],
        mig=[list(m) for m in a.mig],
    )


def lease_out(lease: LeaseRow) -> LeaseOut:
    return LeaseOut(
        **copied(lease, (*LEASE_AS_IS, "started_at", "expires_at", "state", "ended_at")),
        id=str(lease.id),
        job_id=str(lease.job_id),
    )


def job_out(
    job: JobRow,
    now: datetime,
    lease: LeaseRow | None = None,
    released: list[dict[str, Any]] | None = None,
) -> JobOut:
    allocations = [allocation_out(a) for a in job.allocations]
    if not allocations and released:
        allocations = [
            AllocationOut(
                replica=p["replica"],
                node=p["node"],
                gpu_type=p.get("gpu_type"),
                gpus=list(p.get("gpus", [])),
                mig=list(p.get("mig", [])),
                units=p.get("units", 0.0),
                cpu=p.get("cpu", 0.0),
                memory_gb=p.get("memory_gb", 0.0),
                released=True,
            )
            for p in released
        ]
    return JobOut(
        id=str(job.id),
        name=job.name,
        team=job.team,
        pool=job.pool,
        priority=job.priority,
        status=job.status,
        reason=job.reason,
        reason_code=job.reason_code,
        submitted_at=job.submitted_at,
        admitted_at=job.admitted_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        wait_seconds=round(wait_seconds(job, now), 3),
        preemption_count=job.preemption_count,
        units=job.units,
        allocations=allocations,
        lease=lease_out(lease) if lease is not None else None,
        spec=job.spec,
        queue_position=job.queue_position,
        submitted_by=job.submitted_by,
        owner=owner_out(job.submitted_by, job.idempotency_key),
    )


def new_job_out(job: NewJob, name: str) -> JobOut:
    """:func:`job_out` of a job just submitted (pending, holding nothing), from what the
    submit wrote, without reading the row back."""
    return JobOut(
        id=str(job.id),
        name=name,
        team=job.team,
        pool=job.pool,
        priority=job.priority,
        status="pending",
        reason=None,
        submitted_at=job.submitted_at,
        admitted_at=None,
        started_at=None,
        finished_at=None,
        wait_seconds=0.0,
        preemption_count=0,
        units=job.units,
        allocations=[],
        lease=None,
        spec=job.spec,
        queue_position=None,
        submitted_by=job.submitted_by,
    )


def event_out(e: JobEventRow) -> EventOut:
    return EventOut(
        id=str(e.id),
        job_id=str(e.job_id),
        at=e.at,
        type=e.type,
        from_status=e.from_status,
        to_status=e.to_status,
        reason=e.reason,
        reason_code=e.reason_code,
        data=e.data or {},
    )
