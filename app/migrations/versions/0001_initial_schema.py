"""initial schema: cluster objects, teams and tokens, jobs, allocations, leases, events

Revision ID: 0001
Revises:
Create Date: 2026-11-29 17:30:09.676991
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# The oldest code revision that still runs on this schema (docs/upgrading.md):
# the first schema: there is no older code.
min_code_revision: str = "0001"


def upgrade() -> None:
    op.execute(sa.schema.CreateSequence(sa.Sequence("job_revision_seq")))
    op.create_table(
        "gpu_types",
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("memory_gb", sa.Float(), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("product", sa.String(length=255), nullable=True),
        sa.Column("vendor", sa.String(length=63), nullable=False),
        sa.Column("resource_name", sa.String(length=255), nullable=False),
        sa.Column("mig_profiles", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("shareable", sa.Boolean(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_gpu_types")),
    )
    op.create_table(
        "pools",
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("gpu_types", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("guaranteed", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("borrow_limit", sa.Float(), nullable=True),
        sa.Column("lend_limit", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("max_borrow_seconds", sa.Float(), nullable=False),
        sa.Column("reclaim", sa.String(length=16), nullable=False),
        sa.Column("placement", sa.String(length=16), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_pools")),
    )
    op.create_table(
        "priority_classes",
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("value", sa.Integer(), nullable=False),
        sa.Column("preemptible", sa.Boolean(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_priority_classes")),
    )
    op.create_table(
        "settings",
        sa.Column("key", sa.String(length=63), nullable=False),
        sa.Column("value", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_settings")),
    )
    op.create_table(
        "nodes",
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("gpu_type", sa.String(length=63), nullable=True),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("cpu", sa.Float(), nullable=False),
        sa.Column("memory_gb", sa.Float(), nullable=False),
        sa.Column("rack", sa.String(length=63), nullable=True),
        sa.Column("network", sa.String(length=16), nullable=False),
        sa.Column("nvlink_domain", sa.String(length=63), nullable=True),
        sa.Column("mig_layout", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("labels", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("taints", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("schedulable", sa.Boolean(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["gpu_type"],
            ["gpu_types.name"],
            name=op.f("fk_nodes_gpu_type_gpu_types"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_nodes")),
    )
    op.create_table(
        "teams",
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("pool", sa.String(length=63), nullable=False),
        sa.Column("allowed_pools", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("quota_units", sa.Float(), nullable=True),
        sa.Column("quota_by_type", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("default_priority", sa.String(length=63), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["default_priority"],
            ["priority_classes.name"],
            name=op.f("fk_teams_default_priority_priority_classes"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["pool"], ["pools.name"], name=op.f("fk_teams_pool_pools"), ondelete="RESTRICT"
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_teams")),
    )
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("team", sa.String(length=63), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("description", sa.String(length=255), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["team"], ["teams.name"], name=op.f("fk_api_tokens_team_teams"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
    )
    op.create_index(op.f("ix_api_tokens_team"), "api_tokens", ["team"], unique=False)
    op.create_table(
        "jobs",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("team", sa.String(length=63), nullable=False),
        sa.Column("pool", sa.String(length=63), nullable=False),
        sa.Column("priority", sa.String(length=63), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("spec", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("units", sa.Float(), nullable=True),
        sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("queued_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("waited_s", sa.Float(), nullable=False),
        sa.Column("admitted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("preemption_count", sa.Integer(), nullable=False),
        sa.Column("queue_position", sa.Integer(), nullable=True),
        sa.Column(
            "revision",
            sa.BigInteger(),
            server_default=sa.text("nextval('job_revision_seq')"),
            nullable=False,
        ),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("idempotency_hash", sa.String(length=64), nullable=True),
        sa.ForeignKeyConstraint(
            ["pool"], ["pools.name"], name=op.f("fk_jobs_pool_pools"), ondelete="RESTRICT"
        ),
        sa.ForeignKeyConstraint(
            ["priority"],
            ["priority_classes.name"],
            name=op.f("fk_jobs_priority_priority_classes"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["team"], ["teams.name"], name=op.f("fk_jobs_team_teams"), ondelete="RESTRICT"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sa.UniqueConstraint("team", "idempotency_key", name="uq_jobs_team_idempotency_key"),
    )
    op.create_index(op.f("ix_jobs_pool"), "jobs", ["pool"], unique=False)
    op.create_index(op.f("ix_jobs_revision"), "jobs", ["revision"], unique=False)
    op.create_index("ix_jobs_status_submitted_at", "jobs", ["status", "submitted_at"], unique=False)
    op.create_index("ix_jobs_team_id", "jobs", ["team", "id"], unique=False)
    op.create_table(
        "allocations",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("replica", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(length=63), nullable=False),
        sa.Column("gpu_type", sa.String(length=63), nullable=True),
        sa.Column("devices", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("mig", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("share", sa.Float(), nullable=False),
        sa.Column("share_memory_gb", sa.Float(), nullable=False),
        sa.Column("units", sa.Float(), nullable=False),
        sa.Column("cpu", sa.Float(), nullable=False),
        sa.Column("memory_gb", sa.Float(), nullable=False),
        sa.Column("pool", sa.String(length=63), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_allocations_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["node"], ["nodes.name"], name=op.f("fk_allocations_node_nodes"), ondelete="RESTRICT"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_allocations")),
        sa.UniqueConstraint("job_id", "replica", name="uq_allocations_job_replica"),
    )
    op.create_index(op.f("ix_allocations_job_id"), "allocations", ["job_id"], unique=False)
    op.create_index(op.f("ix_allocations_node"), "allocations", ["node"], unique=False)
    op.create_table(
        "job_events",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("type", sa.String(length=32), nullable=False),
        sa.Column("from_status", sa.String(length=16), nullable=True),
        sa.Column("to_status", sa.String(length=16), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("data", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_events_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_events")),
    )
    op.create_index(op.f("ix_job_events_job_id"), "job_events", ["job_id"], unique=False)
    op.create_table(
        "leases",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("borrower", sa.String(length=63), nullable=False),
        sa.Column("lender", sa.String(length=63), nullable=False),
        sa.Column("gpu_type", sa.String(length=63), nullable=False),
        sa.Column("units", sa.Float(), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_leases_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_leases")),
    )
    op.create_index(op.f("ix_leases_job_id"), "leases", ["job_id"], unique=False)
    op.create_index("ix_leases_state_expires_at", "leases", ["state", "expires_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_leases_state_expires_at", table_name="leases")
    op.drop_index(op.f("ix_leases_job_id"), table_name="leases")
    op.drop_table("leases")
    op.drop_index(op.f("ix_job_events_job_id"), table_name="job_events")
    op.drop_table("job_events")
    op.drop_index(op.f("ix_allocations_node"), table_name="allocations")
    op.drop_index(op.f("ix_allocations_job_id"), table_name="allocations")
    op.drop_table("allocations")
    op.drop_index("ix_jobs_team_id", table_name="jobs")
    op.drop_index("ix_jobs_status_submitted_at", table_name="jobs")
    op.drop_index(op.f("ix_jobs_revision"), table_name="jobs")
    op.drop_index(op.f("ix_jobs_pool"), table_name="jobs")
    op.drop_table("jobs")
    op.drop_index(op.f("ix_api_tokens_team"), table_name="api_tokens")
    op.drop_table("api_tokens")
    op.drop_table("teams")
    op.drop_table("nodes")
    op.drop_table("settings")
    op.drop_table("priority_classes")
    op.drop_table("pools")
    op.drop_table("gpu_types")
    op.execute(sa.schema.DropSequence(sa.Sequence("job_revision_seq")))
