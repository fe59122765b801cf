"""SQLAlchemy 2 ORM: the tables gpuq keeps in PostgreSQL.

Cluster objects (GPU types, nodes, pools, teams, priority classes) are
keyed by their name: names are DNS labels that never change, and using
them as keys keeps foreign keys readable in psql. Jobs, allocations,
leases and events use bigint identities (a job id is rendered as a
string in the API and in the core).

The naming convention gives every constraint a stable name so Alembic
migrations can refer to them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Sequence,
    String,
    Text,
    UniqueConstraint,
    and_,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.sql.elements import ColumnElement

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

NAME = String(63)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dict[str, Any]: JSONB, list[Any]: JSONB}


# Monotonic revision of job rows: every change takes the next value, so a
# dispatcher can ask for "rows changed since revision N", and a write can check the
# revision it saw (app/store/state_changes.py).
job_revision_seq = Sequence("job_revision_seq", metadata=Base.metadata)


class Timestamps:
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), onupdate=func.now()
    )


class ManagedBy:
    """``managed_by``: the config file an object came from (``None``: made through the
    API). API writes to a config-managed object are refused (409 naming the file), so
    the file and the API never undo each other (docs/security.md)."""

    managed_by: Mapped[str | None] = mapped_column(String(255))


class GpuTypeRow(ManagedBy, Timestamps, Base):
    __tablename__ = "gpu_types"

    name: Mapped[str] = mapped_column(NAME, primary_key=True)
    memory_gb: Mapped[float] = mapped_column(Float)
    weight: Mapped[float] = mapped_column(Float)
    product: Mapped[str | None] = mapped_column(String(255))
    vendor: Mapped[str] = mapped_column(String(63), default="nvidia")
    resource_name: Mapped[str] = mapped_column(String(255), default="nvidia.com/gpu")
    # node labels of another vendor's product and card memory (migration 0011)
    product_label: Mapped[str | None] = mapped_column(String(317))
    memory_label: Mapped[str | None] = mapped_column(String(317))
    mig_profiles: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict)
    shareable: Mapped[bool] = mapped_column(Boolean, default=False)
    speed: Mapped[float] = mapped_column(Float, default=1.0, server_default="1.0")


class NodeRow(ManagedBy, Timestamps, Base):
    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(NAME, primary_key=True)
    gpu_type: Mapped[str | None] = mapped_column(ForeignKey("gpu_types.name", ondelete="RESTRICT"))
    gpus: Mapped[int] = mapped_column(Integer, default=0)
    cpu: Mapped[float] = mapped_column(Float)
    memory_gb: Mapped[float] = mapped_column(Float)
    rack: Mapped[str | None] = mapped_column(String(63))
    network: Mapped[str] = mapped_column(String(16), default="eth")
    nvlink_domain: Mapped[str | None] = mapped_column(String(63))
    # {"0": ["3g.40gb", "3g.40gb"]}: MIG layout per device index
    mig_layout: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict)
    labels: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict)
    taints: Mapped[list[Any]] = mapped_column(JSONB, default=list)
    schedulable: Mapped[bool] = mapped_column(Boolean, default=True)
    source: Mapped[str] = mapped_column(String(16), default="config")
    # the device layer of a Kubernetes node (app/cluster/k8s_devices.py): mode, offered...
    sharing: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict,
                                                    server_default=text("'{}'::jsonb"))
    # an operator's cordon, apart from the definition (config apply and node sync leave
    # it alone): None, or {"by", "at", "reason", "drain"} (app/store/cordon.py)
    cordon: Mapped[dict[str, Any] | None] = mapped_column(JSONB(none_as_null=True), nullable=True)


class PoolRow(ManagedBy, Timestamps, Base):
    __tablename__ = "pools"

    name: Mapped[str] = mapped_column(NAME, primary_key=True)
    gpu_types: Mapped[list[Any]] = mapped_column(JSONB, default=list)
    guaranteed: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict)
    borrow_limit: Mapped[float | None] = mapped_column(Float)
    lend_limit: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict)
    max_borrow_seconds: Mapped[float] = mapped_column(Float, default=1800.0)
    reclaim: Mapped[str] = mapped_column(String(16), default="always")
    placement: Mapped[str] = mapped_column(String(16), default="binpack")
    weight: Mapped[float] = mapped_column(Float, default=1.0)


class PriorityClassRow(ManagedBy, Timestamps, Base):
    __tablename__ = "priority_classes"

    name: Mapped[str] = mapped_column(NAME, primary_key=True)
    value: Mapped[int] = mapped_column(Integer)
    preemptible: Mapped[bool] = mapped_column(Boolean, default=True)


class TeamRow(ManagedBy, Timestamps, Base):
    __tablename__ = "teams"

    name: Mapped[str] = mapped_column(NAME, primary_key=True)
    pool: Mapped[str] = mapped_column(ForeignKey("pools.name", ondelete="RESTRICT"))
    allowed_pools: Mapped[list[Any]] = mapped_column(JSONB, default=list)
    quota_units: Mapped[float | None] = mapped_column(Float)
    quota_by_type: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict)
    weight: Mapped[float] = mapped_column(Float, default=1.0)
    default_priority: Mapped[str] = mapped_column(
        ForeignKey("priority_classes.name", ondelete="RESTRICT"), default="P1"
    )
    # the highest priority class its jobs may name; NULL: any
    max_priority: Mapped[str | None] = mapped_column(
        ForeignKey("priority_classes.name", ondelete="RESTRICT")
    )
    # Pod policy (app/domain/pod_policy.py): namespaces its Pods may use (empty: the
    # install's job namespace), Pod Security Standards level, ServiceAccount allowlist
    namespaces: Mapped[list[Any]] = mapped_column(
        JSONB, default=list, server_default=text("'[]'::jsonb")
    )
    pod_security: Mapped[str] = mapped_column(
        String(16), default="restricted", server_default="restricted"
    )
    service_accounts: Mapped[list[Any]] = mapped_column(
        JSONB, default=lambda: ["default"], server_default=text("'[\"default\"]'::jsonb")
    )
    automount_service_account_token: Mapped[bool] = mapped_column(
        Boolean, default=False, server_default=text("false")
    )
    # caps on the team's queue (app/store/team_limits.py); NULL: the install's default
    max_pending: Mapped[int | None] = mapped_column(Integer)
    submit_rate: Mapped[float | None] = mapped_column(Float)


class ApiTokenRow(Base):
    """An API token; only its SHA-256 is stored (tokens are random, 32 bytes).

    ``scope`` is ``admin``, ``metrics``, ``team:<name>`` or ``team:<name>:read`` (NULL
    on rows written before migration 0006: ``team:<team>``). Admin and metrics tokens
    have no team.
    """

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    team: Mapped[str | None] = mapped_column(
        ForeignKey("teams.name", ondelete="CASCADE"), index=True
    )
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    description: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    name: Mapped[str | None] = mapped_column(String(63))
    scope: Mapped[str | None] = mapped_column(String(140))
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_by: Mapped[str | None] = mapped_column(String(255))


class SettingRow(Base):
    """Key/value settings kept in the database (e.g. ``scheduler`` knobs)."""

    __tablename__ = "settings"

    key: Mapped[str] = mapped_column(String(63), primary_key=True)
    value: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), onupdate=func.now()
    )


class JobRow(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("team", "idempotency_key", name="uq_jobs_team_idempotency_key"),
        Index("ix_jobs_status_submitted_at", "status", "submitted_at"),
        Index("ix_jobs_team_id", "team", "id"),
        # a team's pending jobs, counted against its cap at submit (migration 0009)
        Index("ix_jobs_team_pending", "team", postgresql_where=text("status = 'pending'")),
        # the front door's lookup of the jobs its workloads made, by key (migration 0016)
        Index("ix_jobs_idempotency_key", "idempotency_key",
              postgresql_where=text("idempotency_key IS NOT NULL")),
        # windowed reports: jobs submitted, admitted or finished since T (migration 0004)
        Index("ix_jobs_submitted_at", "submitted_at"),
        *(
            Index(f"ix_jobs_{c}", c, postgresql_where=text(f"{c} IS NOT NULL"))
            for c in ("admitted_at", "finished_at")
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(NAME)
    team: Mapped[str] = mapped_column(ForeignKey("teams.name", ondelete="RESTRICT"))
    pool: Mapped[str] = mapped_column(ForeignKey("pools.name", ondelete="RESTRICT"), index=True)
    priority: Mapped[str] = mapped_column(ForeignKey("priority_classes.name", ondelete="RESTRICT"))
    status: Mapped[str] = mapped_column(String(16), default="pending")
    reason: Mapped[str | None] = mapped_column(Text)
    # the reason's ReasonCode value (app/scheduling/verdicts.py), written with it;
    # NULL when the core did not give the reason (migration 0014)
    reason_code: Mapped[str | None] = mapped_column(String(32))
    # the start time the pending reason names ("expected start in 52s"), written with it
    # by the dispatcher and cleared by any state change (migration 0012)
    reason_start_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    spec: Mapped[dict[str, Any]] = mapped_column(JSONB)
    # CU the job holds (sum of allocations); the requested CU while pending when known
    units: Mapped[float | None] = mapped_column(Float)
    # the original submit time; kept across requeues (preemption)
    submitted_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # start of the current pending period; waited_s holds the closed periods
    queued_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    waited_s: Mapped[float] = mapped_column(Float, default=0.0)
    admitted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    preemption_count: Mapped[int] = mapped_column(Integer, default=0)
    # the longest attempt that was stopped before it finished (preempted or
    # reclaimed): a known lower bound on the job's run time (migration 0005)
    longest_attempt_s: Mapped[float | None] = mapped_column(Float)
    # position in the dispatch order of the last cycle (pending jobs only)
    queue_position: Mapped[int | None] = mapped_column(Integer)
    revision: Mapped[int] = mapped_column(
        BigInteger, server_default=text("nextval('job_revision_seq')"), index=True
    )
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    # who submitted: a token's name (``token:<name>``) or a JWT subject (``oidc:<sub>``)
    submitted_by: Mapped[str | None] = mapped_column(String(255))
    idempotency_hash: Mapped[str | None] = mapped_column(String(64))
    # id of the transaction that last took a revision for this row (set by the
    # jobs_xact trigger, migration 0002): what incremental refreshes key on
    xact: Mapped[int | None] = mapped_column(BigInteger, index=True)

    # Live allocations only (``live_row``): rows of stopped Pods still draining
    # (``releasing_since`` set) are not the job's capacity any more.
    allocations: Mapped[list[AllocationRow]] = relationship(
        back_populates="job",
        primaryjoin=lambda: and_(JobRow.id == AllocationRow.job_id, live_row()),
        cascade="all, delete-orphan",
        order_by="AllocationRow.replica",
        passive_deletes=True,
    )


class AllocationRow(Base):
    """One replica's share of a node: whole cards, MIG slices or a vGPU share."""

    __tablename__ = "allocations"
    # one live row per replica; a requeued job's old rows may still be releasing
    __table_args__ = (
        Index(
            "uq_allocations_job_replica_live",
            "job_id",
            "replica",
            unique=True,
            postgresql_where=text("releasing_since IS NULL"),
        ),
        Index(
            "ix_allocations_releasing",
            "job_id",
            postgresql_where=text("releasing_since IS NOT NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    replica: Mapped[int] = mapped_column(Integer)
    node: Mapped[str] = mapped_column(ForeignKey("nodes.name", ondelete="RESTRICT"), index=True)
    gpu_type: Mapped[str | None] = mapped_column(String(63))
    devices: Mapped[list[Any]] = mapped_column(JSONB, default=list)
    # [[device, slice index, profile], ...]
    mig: Mapped[list[Any]] = mapped_column(JSONB, default=list)
    share: Mapped[float] = mapped_column(Float, default=0.0)
    share_memory_gb: Mapped[float] = mapped_column(Float, default=0.0)
    units: Mapped[float] = mapped_column(Float, default=0.0)
    cpu: Mapped[float] = mapped_column(Float, default=0.0)
    memory_gb: Mapped[float] = mapped_column(Float, default=0.0)
    pool: Mapped[str] = mapped_column(String(63))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    # Set when the job stopped holding this capacity; the row still counts as
    # used until the cluster confirms the Pods are gone (app/store/releasing_rows.py).
    releasing_since: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    job: Mapped[JobRow] = relationship(back_populates="allocations")


def live_row() -> ColumnElement[bool]:
    """The row half of "live allocation" (the whole definition, job state
    included, and every query built on it: app/store/live_allocations.py): the row is the
    capacity of the job's current attempt, not of Pods still stopping."""
    return AllocationRow.releasing_since.is_(None)


def releasing_row() -> ColumnElement[bool]:
    """A row of a stopped attempt whose Pods still hold the capacity."""
    return AllocationRow.releasing_since.is_not(None)


class LeaseRow(Base):
    """CU a pool borrowed beyond its guarantee for one job (docs/pools-leases.md)."""

    __tablename__ = "leases"
    __table_args__ = (Index("ix_leases_state_expires_at", "state", "expires_at"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    borrower: Mapped[str] = mapped_column(String(63))
    lender: Mapped[str] = mapped_column(String(63))
    gpu_type: Mapped[str] = mapped_column(String(63))
    units: Mapped[float] = mapped_column(Float)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    state: Mapped[str] = mapped_column(String(16), default="active")


class JobEventRow(Base):
    """A job's history: every state change and notable decision."""

    __tablename__ = "job_events"
    __table_args__ = (  # migration 0004: a window of events; a job's last admission
        Index("ix_job_events_at", "at"),
        Index(
            "ix_job_events_admitted",
            "job_id",
            "id",
            postgresql_where=text("to_status = 'admitted'"),
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    type: Mapped[str] = mapped_column(String(32))
    from_status: Mapped[str | None] = mapped_column(String(16))
    to_status: Mapped[str | None] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text)
    reason_code: Mapped[str | None] = mapped_column(String(32))  # as jobs.reason_code
    data: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict)


class AuditRow(Base):
    """One admin write: who changed which object, when, its old and new value."""

    __tablename__ = "audit_log"
    __table_args__ = (Index("ix_audit_log_kind_name", "kind", "name"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    actor: Mapped[str] = mapped_column(String(255))
    action: Mapped[str] = mapped_column(String(32))
    kind: Mapped[str] = mapped_column(String(32))
    name: Mapped[str] = mapped_column(String(255))
    old: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    new: Mapped[dict[str, Any] | None] = mapped_column(JSONB)


ALL_TABLES = [
    "audit_log",
    "job_events",
    "leases",
    "allocations",
    "jobs",
    "api_tokens",
    "settings",
    "teams",
    "nodes",
    "pools",
    "priority_classes",
    "gpu_types",
    "queue_order",
    "runtime_history",
]


class CatalogRevisionRow(Base):
    """One row; its number grows with every write to the catalog tables
    (statement triggers, migration 0002), so caches of them know when to reload."""

    __tablename__ = "catalog_revision"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    revision: Mapped[int] = mapped_column(BigInteger)


class QueueOrderRow(Base):
    """One row: the pending jobs in the dispatch order of the last cycle."""

    __tablename__ = "queue_order"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_ids: Mapped[list[int]] = mapped_column(ARRAY(BigInteger))
    # the dispatcher that wrote it: another one's write means the reasons it wrote
    # (which take no job revision) are unknown to this one's picture
    writer: Mapped[str | None] = mapped_column(String(64))


class RuntimeHistoryRow(Base):
    """The run-time summary of one (team, request class): how many runs succeeded and the
    mean of their log run time over about the last 20 (app/domain/runtime_history.py).
    Updated when a job succeeds; bounded by teams x classes, not by the job history."""

    __tablename__ = "runtime_history"

    team: Mapped[str] = mapped_column(NAME, primary_key=True)
    request_class: Mapped[str] = mapped_column(String(255), primary_key=True)
    runs: Mapped[int] = mapped_column(Integer)
    mean_log: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), onupdate=func.now()
    )
