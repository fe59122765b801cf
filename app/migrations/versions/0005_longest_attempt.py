"""jobs.longest_attempt_s: a known lower bound on a requeued job's run time

When a running job is preempted or its lease reclaimed, the attempt it
loses ran for some time and did not finish, so the job needs more than
that. The longest such attempt is kept on the job row; the scheduler never
admits the job again on a lease that ends before that bound (a lease
shorter than the job's run could only end in another reclaim).
Expand-only: a nullable column old code simply does not read.

Revision ID: 0005
Revises: 0004
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# The oldest code revision that still runs on this schema (docs/upgrading.md):
# expand only: a nullable column the previous code does not read.
min_code_revision: str = "0004"


def upgrade() -> None:
    op.add_column("jobs", sa.Column("longest_attempt_s", sa.Float(), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "longest_attempt_s")
