"""allocations.releasing_since: capacity held by Pods that are still stopping

When a job stops holding capacity (cancel, preemption, lease reclaim, a
descheduler move) its allocation rows are not deleted at once: they are
marked ``releasing_since`` and keep counting as used until the cluster
confirms the job's old Pods are gone (on Kubernetes, after the eviction
grace period). Only live rows (``releasing_since IS NULL``) are unique per
(job, replica): a requeued job may be admitted anew while its old rows
still drain.

Revision ID: 0003
Revises: 0002
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# The oldest code revision that still runs on this schema (docs/upgrading.md):
# before the expand-then-contract rule (0004): code before 0003 would count
# draining allocations as live.
min_code_revision: str = "0003"


def upgrade() -> None:
    op.add_column(
        "allocations", sa.Column("releasing_since", sa.DateTime(timezone=True), nullable=True)
    )
    op.drop_constraint("uq_allocations_job_replica", "allocations", type_="unique")
    op.create_index(
        "uq_allocations_job_replica_live",
        "allocations",
        ["job_id", "replica"],
        unique=True,
        postgresql_where=sa.text("releasing_since IS NULL"),
    )
    op.create_index(
        "ix_allocations_releasing",
        "allocations",
        ["job_id"],
        postgresql_where=sa.text("releasing_since IS NOT NULL"),
    )


def downgrade() -> None:
    # rows still draining would break the old constraint: drop them (capacity freed)
    op.execute("DELETE FROM allocations WHERE releasing_since IS NOT NULL")
    op.drop_index("ix_allocations_releasing", table_name="allocations")
    op.drop_index("uq_allocations_job_replica_live", table_name="allocations")
    op.create_unique_constraint(
        "uq_allocations_job_replica", "allocations", ["job_id", "replica"]
    )
    op.drop_column("allocations", "releasing_since")
