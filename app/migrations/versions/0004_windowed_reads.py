"""indexes for windowed reports and the metrics cursor; autovacuum settings for the job tables

Reports over a window ("the last day") read the jobs that were pending, or
were submitted, admitted or finished inside it. With an index on each of
those timestamps PostgreSQL answers that with a BitmapOr of four small
index scans instead of reading every job ever submitted, so a report's
cost grows with the window, not the history; where a finished job ran comes
from its last ``admitted`` event (a partial index of those). ``job_events.at`` lets a
freshly started metrics process read the last day of events without
scanning all of them.

The job tables churn: every job row is updated 3-5 times (each update
leaves a dead tuple), ``job_events`` only grows, and ``queue_order`` is one
row holding the whole dispatch order that is rewritten every cycle (its
TOAST chunks die each time). PostgreSQL's default autovacuum thresholds
(20 % of a table dead) let a 100,000-job table carry tens of thousands of
dead rows; these per-table settings (docs/operations.md "Autovacuum")
vacuum and analyze them much earlier. They are storage parameters: they
take effect on any server where autovacuum is on, and change nothing else.

Expand only: new indexes and settings, nothing dropped or renamed.

Revision ID: 0004
Revises: 0003
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# The oldest code revision that still runs on this schema (docs/upgrading.md):
# expand only: new indexes and storage parameters.
min_code_revision: str = "0003"

JOB_TIMES = ("submitted_at", "admitted_at", "finished_at")

# table -> storage parameters (toast.* apply to the table's TOAST relation)
AUTOVACUUM = {
    "jobs": (
        "autovacuum_vacuum_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.02"
    ),
    "job_events": (
        "autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.02"
    ),
    "allocations": (
        "autovacuum_vacuum_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05"
    ),
    "queue_order": (
        "autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 50, "
        "toast.autovacuum_vacuum_scale_factor = 0, toast.autovacuum_vacuum_threshold = 200"
    ),
}


def upgrade() -> None:
    op.create_index("ix_jobs_submitted_at", "jobs", ["submitted_at"], unique=False)
    for col in ("admitted_at", "finished_at"):  # NULL until it happens: left out, so a
        op.create_index(  # submit does not pay for them
            f"ix_jobs_{col}", "jobs", [col], unique=False,
            postgresql_where=sa.text(f"{col} IS NOT NULL"),
        )
    op.create_index("ix_job_events_at", "job_events", ["at"], unique=False)
    op.create_index(
        "ix_job_events_admitted",
        "job_events",
        ["job_id", "id"],
        unique=False,
        postgresql_where=sa.text("to_status = 'admitted'"),
    )
    for table, params in AUTOVACUUM.items():
        op.execute(f"ALTER TABLE {table} SET ({params})")


def downgrade() -> None:
    for table, params in AUTOVACUUM.items():
        names = ", ".join(p.split("=")[0].strip() for p in params.split(","))
        op.execute(f"ALTER TABLE {table} RESET ({names})")
    op.drop_index("ix_job_events_admitted", table_name="job_events")
    op.drop_index("ix_job_events_at", table_name="job_events")
    for col in JOB_TIMES:
        op.drop_index(f"ix_jobs_{col}", table_name="jobs")
